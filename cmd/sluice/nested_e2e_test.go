package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A hierarchy whose user level counts within the organisation, through a
// real serve process on Pebble: alice of acme and alice of globex are two
// budgets; the admin listener's /v1/usage, /v1/keys, /v1/throttled and
// /v1/reset show and take her key within acme as {header:acme}user:alice,
// and sluice inspect lists it so once the gateway has stopped.
func TestServeProcessNestedKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	up := upstream(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfgPath := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfgPath, fmt.Sprintf(`store:
  backend: pebble
  dir: %s
identity:
  trusted_proxies: [127.0.0.1/32]
  user_header: X-User-ID
rules:
  - {name: org-hour,  group: org, path_prefix: /v1/, scope: "header:X-Org-ID", algorithm: fixed_window, limit: 100, window: 1h}
  - {name: user-hour, group: org, path_prefix: /v1/, scope: user, algorithm: fixed_window, limit: 2, window: 1h}
`, state))
	const token = "0123456789abcdef0123456789abcdef"
	tokenPath := filepath.Join(dir, "token")
	writeFile(t, tokenPath, token+"\n")
	p := startServeProcess(t, bin, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL,
		"--admin", "127.0.0.1:0", "--admin-token-file", tokenPath, "--usage-listen", "127.0.0.1:0")
	m := usageAddrRE.FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no admin address in the log:\n%s", p.stderr)
	}
	admin := "http://" + m[1]
	api := "http://" + p.listen + "/v1/items"
	for _, org := range []string{"acme", "globex"} {
		if got := codes(t, 3, "GET", api, "X-Org-ID", org, "X-User-ID", "alice"); fmt.Sprint(got) != "[200 200 429]" {
			t.Fatalf("alice of %s: %v, want her 2 there", org, got)
		}
	}
	const within = "{header:acme}user:alice"
	_, by := decodeUsage(t, mustOK(t, token, admin+"/v1/usage?header.X-Org-ID=acme&user=alice&ip=127.0.0.1"))
	if u, o := by["user-hour"], by["org-hour"]; u.Key != within || u.Remaining != 0 || o.Key != "header:acme" || o.Remaining != 98 {
		t.Errorf("alice of acme's usage: user-hour %+v, org-hour %+v; want %s with none left, header:acme with 98", u, o, within)
	}
	var state0 struct {
		Key       string `json:"key"`
		Remaining int64  `json:"remaining"`
	}
	if err := json.Unmarshal([]byte(mustOK(t, token, admin+"/v1/keys?rule=user-hour&key="+url.QueryEscape(within))), &state0); err != nil {
		t.Fatal(err)
	}
	if state0.Key != within || state0.Remaining != 0 {
		t.Errorf("/v1/keys of %s: %+v, want none left", within, state0)
	}
	var page throttledJSON
	if err := json.Unmarshal([]byte(mustOK(t, token, admin+"/v1/throttled?rule=user-hour")), &page); err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, c := range page.Callers {
		listed = append(listed, c.Key)
	}
	if fmt.Sprint(listed) != fmt.Sprint([]string{within, "{header:globex}user:alice"}) && fmt.Sprint(listed) != fmt.Sprint([]string{"{header:globex}user:alice", within}) {
		t.Errorf("/v1/throttled lists %v, want alice within acme and within globex", listed)
	}
	if code, body := adminDo(t, testClient, "POST", admin+"/v1/reset", token, "application/x-www-form-urlencoded", url.Values{"rule": {"user-hour"}, "key": {within}}.Encode()); code != 200 || !strings.Contains(body, `"reset": true`) {
		t.Errorf("/v1/reset of %s: %d %s", within, code, body)
	}
	if got := codes(t, 1, "GET", api, "X-Org-ID", "acme", "X-User-ID", "alice"); fmt.Sprint(got) != "[200]" {
		t.Errorf("alice of acme after her reset: %v", got)
	}
	if got := codes(t, 1, "GET", api, "X-Org-ID", "globex", "X-User-ID", "alice"); fmt.Sprint(got) != "[429]" {
		t.Errorf("alice of globex after acme's alice was reset: %v, want still denied", got)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(t, 10*time.Second); err != nil {
		t.Fatalf("serve after SIGTERM: %v:\n%s", err, p.stderr)
	}
	views := inspectJSON(t, "--backend", "pebble", "--dir", state, "--namespace", "user-hour")
	var keys []string
	for _, v := range views {
		keys = append(keys, v.Key)
	}
	if fmt.Sprint(keys) != fmt.Sprint([]string{within, "{header:globex}user:alice"}) {
		t.Errorf("sluice inspect lists %v under user-hour, want alice within acme and within globex", keys)
	}
	if code, _, stderr := runCmd(t, "", "inspect", "--backend", "pebble", "--dir", state, "--key", within); code != 0 {
		t.Errorf("sluice inspect --key %s: exit %d %s", within, code, stderr)
	}
}
