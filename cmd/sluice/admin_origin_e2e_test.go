package main

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var serveAdminRE = regexp.MustCompile(`msg="sluice serve: listening" listen=\S+ admin=(\S+)`)

// adminRequest sends one request to the admin listener at addr with the
// Host header host (empty: addr) and the header pairs hdr, and returns its
// status.
func adminRequest(t *testing.T, method, addr, host, path, body string, hdr ...string) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// A browser on the operator's machine reaches the loopback admin
// listener: a page of another site can POST a form to it, and DNS
// rebinding can make the attacker's own name resolve to 127.0.0.1. The
// real serve process refuses both: a Host that is not an IP address,
// localhost or a configured name is answered 421, a state-changing request
// carrying a foreign Origin (or Sec-Fetch-Site: cross-site) 403, and the
// blocked caller stays blocked. curl (no Origin), a same-origin page and a
// probe naming the pod's address are answered.
func TestServeProcessAdminRefusesCrossSite(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	up := upstream(t)
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	writeFile(t, cfgPath, gatewayConfig(memoryStore, "", 1)+"server:\n  admin_hosts: [sluice-admin.internal]\n")
	p := startServeProcess(t, bin, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL,
		"--admin", "127.0.0.1:0", "--admin-host", "ops.example.net")
	m := serveAdminRE.FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no admin address in the log:\n%s", p.stderr)
	}
	admin := m[1]
	_, port, _ := net.SplitHostPort(admin)
	url := "http://" + p.listen + "/x"
	if got := codes(t, 2, "GET", url); got[0] != 200 || got[1] != 429 {
		t.Fatalf("spending the budget: %v, want [200 429]", got)
	}
	const reset = "rule=catch-all&key=ip:127.0.0.1"
	blocked := func(what string) {
		t.Helper()
		if got := codes(t, 1, "GET", url); got[0] != 429 {
			t.Errorf("after %s: %v, want the caller still blocked (429)", what, got)
		}
	}

	refused := []struct {
		name string
		want int
		host string
		hdr  []string
	}{
		{"DNS rebinding: the attacker's name in Host", 421, "evil.example:" + port, nil},
		{"DNS rebinding with a same-origin Origin", 421, "evil.example:" + port, []string{"Origin", "http://evil.example:" + port}},
		{"the issue's form POST", 421, "evil.example:" + port, []string{"Origin", "http://evil.example"}},
		{"a name that only ends in a configured one", 421, "x.sluice-admin.internal:" + port, nil},
		{"foreign Origin on the loopback address", 403, "", []string{"Origin", "http://evil.example"}},
		{"Origin of another port on loopback", 403, "", []string{"Origin", "http://127.0.0.1:1"}},
		{"opaque Origin", 403, "", []string{"Origin", "null"}},
		{"Sec-Fetch-Site: cross-site", 403, "", []string{"Sec-Fetch-Site", "cross-site"}},
	}
	for _, c := range refused {
		if got := adminRequest(t, "POST", admin, c.host, "/v1/reset", reset, c.hdr...); got != c.want {
			t.Errorf("%s: POST /v1/reset answered %d, want %d", c.name, got, c.want)
		}
		blocked(c.name)
	}
	// Reading is refused under a foreign Host too (DNS rebinding reads).
	for _, path := range []string{"/metrics", "/rules", "/v1/keys?rule=catch-all&key=ip:127.0.0.1"} {
		if got := adminRequest(t, "GET", admin, "evil.example:"+port, path, ""); got != 421 {
			t.Errorf("GET %s with Host evil.example: %d, want 421", path, got)
		}
	}

	// /healthz answers whatever the Host: a probe names the pod's address
	// or a service's name.
	for _, host := range []string{"10.1.2.3:" + port, "evil.example", "my-svc.ns.svc.cluster.local:" + port} {
		if got := adminRequest(t, "GET", admin, host, "/healthz", ""); got != 200 {
			t.Errorf("GET /healthz with Host %s: %d, want 200", host, got)
		}
	}
	// Addresses, localhost and the configured names are the listener's.
	for _, host := range []string{"", "127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "[::1]:" + port, "10.1.2.3",
		"sluice-admin.internal:" + port, "Sluice-Admin.Internal.", "ops.example.net:" + port} {
		if got := adminRequest(t, "GET", admin, host, "/rules", ""); got != 200 {
			t.Errorf("GET /rules with Host %q: %d, want 200", host, got)
		}
	}
	// A same-origin page may reset (its Origin is the Host)...
	if got := adminRequest(t, "POST", admin, "", "/v1/reset", reset, "Origin", "http://"+admin, "Sec-Fetch-Site", "same-origin"); got != 200 {
		t.Errorf("same-origin POST /v1/reset: %d, want 200", got)
	}
	if got := codes(t, 2, "GET", url); got[0] != 200 || got[1] != 429 {
		t.Errorf("after the same-origin reset: %v, want [200 429]", got)
	}
	// ...and so may curl, which sends no Origin.
	if got := adminRequest(t, "POST", admin, "", "/v1/reset", reset); got != 200 {
		t.Errorf("POST /v1/reset without Origin: %d, want 200", got)
	}
	if got := codes(t, 1, "GET", url); got[0] != 200 {
		t.Errorf("after the reset: %v, want 200", got)
	}
}

// rls's admin listener refuses the same: a foreign Host (421) and a
// cross-origin POST (403) leave a blocked descriptor blocked; /healthz
// answers any Host; curl resets.
func TestRLSProcessAdminRefusesCrossSite(t *testing.T) {
	t.Parallel()
	waitAwayFromDayBoundary(t)
	cfg := filepath.Join(t.TempDir(), "messaging.yaml")
	writeFile(t, cfg, rlsAdminConfig)
	p := startRLS(t, "--config", cfg, "--admin-host", "rls-admin.internal")
	_, port, _ := net.SplitHostPort(p.admin)
	spend := func() string {
		return rlsAnswer(p.ask(t, "messaging", 0, rd("message_type", "marketing", "to_number", "2061111111")))
	}
	spend()
	spend()
	if got := spend(); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("third call: %s, want OVER_LIMIT", got)
	}
	const q = "domain=messaging&entry=message_type=marketing&entry=to_number=2061111111"
	if got := adminRequest(t, "POST", p.admin, "evil.example:"+port, "/v1/reset", q, "Origin", "http://evil.example"); got != 421 {
		t.Errorf("POST /v1/reset with Host evil.example: %d, want 421", got)
	}
	if got := adminRequest(t, "POST", p.admin, "", "/v1/reset", q, "Origin", "http://evil.example"); got != 403 {
		t.Errorf("POST /v1/reset with a foreign Origin: %d, want 403", got)
	}
	if got := spend(); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("after the refused resets: %s, want still OVER_LIMIT", got)
	}
	if got := adminRequest(t, "GET", p.admin, "10.1.2.3:"+port, "/healthz", ""); got != 200 {
		t.Errorf("GET /healthz with a pod's address in Host: %d, want 200", got)
	}
	if got := adminRequest(t, "GET", p.admin, "rls-admin.internal:"+port, "/config", ""); got != 200 {
		t.Errorf("GET /config with Host rls-admin.internal: %d, want 200", got)
	}
	if got := adminRequest(t, "POST", p.admin, "", "/v1/reset", q); got != 200 {
		t.Errorf("POST /v1/reset without Origin: %d, want 200", got)
	}
	if got := spend(); got != "OK: OK" {
		t.Errorf("after the reset: %s, want OK", got)
	}
}
