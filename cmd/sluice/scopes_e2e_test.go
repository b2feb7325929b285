package main

import (
	"fmt"
	"path/filepath"
	"testing"
)

// scopesConfig is a gateway in memory with a hierarchy organisation →
// team → user, the organisation and the team read from headers that a
// trusted proxy sets; trusted lists the proxies.
func scopesConfig(trusted string) string {
	return fmt.Sprintf(`identity:
  trusted_proxies: [%s]
rules:
  - {name: org-hour,  group: org-tree, path_prefix: /v1/, scope: "header:X-Org-ID",  algorithm: fixed_window, limit: 4, window: 1h}
  - {name: team-hour, group: org-tree, path_prefix: /v1/, scope: "header:X-Team-ID", algorithm: fixed_window, limit: 3, window: 1h}
  - {name: user-hour, group: org-tree, path_prefix: /v1/, scope: user,               algorithm: fixed_window, limit: 2, window: 1h}
  - {name: org-orders, path: "/v1/orgs/{org}/orders", scope: "param:org", algorithm: fixed_window, limit: 100, window: 1h}
`, trusted)
}

// A hierarchy through a real sluice serve process: the organisation and
// team headers are believed from the trusted proxy (the tests' loopback),
// every level is decided together and a denial at one spends nothing at
// the others; from a peer that is no trusted proxy, the headers are
// ignored and both levels count the peer's address instead.
func TestServeProcessHeaderScopesAndHierarchy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	up := upstream(t)

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "trusted.yaml")
	writeFile(t, cfgPath, scopesConfig("127.0.0.1/32"))
	p := startServeProcess(t, bin, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL)
	url := "http://" + p.listen + "/v1/orgs/acme/orders"
	who := func(org, team, user string) []string {
		return []string{"X-Org-ID", org, "X-Team-ID", team, "X-User-ID", user}
	}
	for i, step := range []struct {
		org, team, user string
		want            string
		policy          string // the denying rule's
	}{
		{"acme", "red", "alice", "[200 200 429]", "user-hour"}, // alice's 2; red and acme keep 1 and 2
		{"acme", "red", "bob", "[200 429]", "team-hour"},       // red's third
		{"acme", "blue", "carol", "[200 429]", "org-hour"},     // acme's fourth
		{"globex", "green", "dave", "[200 200 429]", "user-hour"},
	} {
		got := codes(t, len(step.want)/4, "GET", url, who(step.org, step.team, step.user)...)
		if fmt.Sprint(got) != step.want {
			t.Errorf("step %d (%s/%s/%s): %v, want %s", i, step.org, step.team, step.user, got, step.want)
		}
		_, h := send(t, "GET", url, who(step.org, step.team, step.user)...)
		if pol := h.Get("RateLimit-Policy"); pol == "" || pol[:len(step.policy)+2] != `"`+step.policy+`"` {
			t.Errorf("step %d: denied under %q, want %s", i, pol, step.policy)
		}
	}

	// No trusted proxy: the org and team headers are a client's claim,
	// ignored; both levels count the loopback's address, which every
	// client here shares: after alice's 2, bob's first is red's (the
	// loopback's) third, and dave of another organisation is denied too.
	cfgPath = filepath.Join(dir, "untrusted.yaml")
	writeFile(t, cfgPath, scopesConfig("10.0.0.0/8"))
	p = startServeProcess(t, bin, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL)
	url = "http://" + p.listen + "/v1/orgs/acme/orders"
	for i, step := range []struct {
		org, team, user, want string
	}{
		{"acme", "red", "alice", "[200 200 429]"},
		{"acme", "red", "bob", "[200 429]"},
		{"globex", "green", "dave", "[429]"},
	} {
		if got := codes(t, len(step.want)/4, "GET", url, who(step.org, step.team, step.user)...); fmt.Sprint(got) != step.want {
			t.Errorf("untrusted step %d (%s/%s/%s): %v, want %s", i, step.org, step.team, step.user, got, step.want)
		}
	}
}
