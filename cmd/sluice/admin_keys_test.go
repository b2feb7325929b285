package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// adminConfig has one token bucket rule of 3 an hour per user on POST
// /api/orders and one per API key on /api/search.
const adminConfig = `store:
  backend: memory
rules:
  - name: orders-write
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: token_bucket
    limit: 3
    window: 1h
  - name: search
    path_prefix: /api/search
    scope: api_key
    algorithm: fixed_window
    limit: 2
    window: 1h
`

// adminDo sends one admin request; token, when not empty, as a bearer
// token. It returns the status and body.
func adminDo(t *testing.T, client *http.Client, method, url, token, contentType, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func readKeyState(t *testing.T, body string) keyStateJSON {
	t.Helper()
	var k keyStateJSON
	if err := json.Unmarshal([]byte(body), &k); err != nil {
		t.Fatalf("/v1/keys body %q: %v", body, err)
	}
	return k
}

// On loopback without a token: GET /v1/keys shows a blocked caller's
// state, POST /v1/reset (form or JSON) unblocks it, and the reset is
// logged with who asked.
func TestAdminResetAndKeys(t *testing.T) {
	up := upstream(t)
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfgPath, adminConfig)
	s := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--admin", "127.0.0.1:0")
	orders := "http://" + s.listen + "/api/orders"
	admin := "http://" + s.admin
	// A caller never seen has the whole budget, full now; one who spent a
	// token has the rest, full once that token is back (20 minutes).
	code, body := adminDo(t, testClient, "GET", admin+"/v1/keys?rule=orders-write&key=user:bob", "", "", "")
	if k := readKeyState(t, body); code != 200 || !k.AllowedNow || k.Remaining != 3 || k.FullInSeconds != 0 || k.Record != nil {
		t.Errorf("/v1/keys for fresh bob: %d %+v, want 3 to spend, full now, no record", code, k)
	}
	if got := codes(t, 1, "POST", orders, "X-User-ID", "bob"); got[0] != 200 {
		t.Fatalf("bob's order: %v", got)
	}
	code, body = adminDo(t, testClient, "GET", admin+"/v1/keys?rule=orders-write&key=user:bob", "", "", "")
	if k := readKeyState(t, body); code != 200 || !k.AllowedNow || k.Remaining != 2 || k.FullInSeconds <= 1100 || k.FullInSeconds > 1200 {
		t.Errorf("/v1/keys for bob after one order: %d %+v, want 2 to spend, full in about 1200 s", code, k)
	}

	if got := codes(t, 4, "POST", orders, "X-User-ID", "alice"); fmt.Sprint(got) != "[200 200 200 429]" {
		t.Fatalf("alice's orders: %v", got)
	}

	code, body = adminDo(t, testClient, "GET", admin+"/v1/keys?rule=orders-write&key=user:alice", "", "", "")
	k := readKeyState(t, body)
	if code != 200 || k.Key != "user:alice" || k.Override || k.Limit != 3 || k.AllowedNow || k.Remaining != 0 || k.Record == nil || k.Record.get("spent") == "" {
		t.Fatalf("/v1/keys for blocked alice: %d %+v, want her spent record, nothing to spend now", code, k)
	}
	// Full again in about an hour (three tokens at one per 20 minutes),
	// less the time the requests took.
	if k.FullInSeconds <= 3500 || k.FullInSeconds > 3600 || k.RetryAfterSeconds <= 1100 || k.FullAt == "" {
		t.Errorf("/v1/keys: full in %vs (at %q), retry after %vs; want about 3600 and 1200", k.FullInSeconds, k.FullAt, k.RetryAfterSeconds)
	}

	// Unblock her with a form.
	code, body = adminDo(t, testClient, "POST", admin+"/v1/reset", "", "application/x-www-form-urlencoded", url.Values{"rule": {"orders-write"}, "key": {"user:alice"}}.Encode())
	if code != 200 || !strings.Contains(body, `"reset": true`) {
		t.Fatalf("POST /v1/reset: %d %s", code, body)
	}
	if got := codes(t, 4, "POST", orders, "X-User-ID", "alice"); fmt.Sprint(got) != "[200 200 200 429]" {
		t.Errorf("alice after the reset: %v, want her whole budget again", got)
	}
	if !strings.Contains(s.stderr.String(), `msg="sluice serve: admin reset" rule=orders-write key=user:alice remote=127.0.0.1:`) {
		t.Errorf("the reset is not logged with who asked:\n%s", s.stderr)
	}

	// An API key is written raw and reset as the gateway keyed it.
	search := "http://" + s.listen + "/api/search"
	if got := codes(t, 3, "GET", search, "X-API-Key", "sk_live_1"); fmt.Sprint(got) != "[200 200 429]" {
		t.Fatalf("sk_live_1's searches: %v", got)
	}
	code, body = adminDo(t, testClient, "POST", admin+"/v1/reset", "", "application/json", `{"rule":"search","key":"key:sk_live_1"}`)
	if code != 200 || strings.Contains(body, "sk_live") {
		t.Fatalf("POST /v1/reset JSON: %d %s (want 200, and the key's hash, not the key)", code, body)
	}
	if got := codes(t, 1, "GET", search, "X-API-Key", "sk_live_1"); got[0] != 200 {
		t.Errorf("sk_live_1 after the reset: %v", got)
	}
	if strings.Contains(s.stderr.String(), "sk_live") {
		t.Errorf("the log shows an API key:\n%s", s.stderr)
	}

	// The key Sluice shows for an API-key caller is the key it takes
	// back: /v1/keys, the reset's reply and the log say keyhash:HEX, and
	// resetting that unblocks the caller. Written as key:HEX it is a raw
	// API key (hashed again): no record, not reported as done.
	codes(t, 3, "GET", search, "X-API-Key", "sk_live_2")
	code, body = adminDo(t, testClient, "GET", admin+"/v1/keys?rule=search&key=key:sk_live_2", "", "", "")
	var shown keyStateJSON
	if err := json.Unmarshal([]byte(body), &shown); code != 200 || err != nil || !strings.HasPrefix(shown.Key, "keyhash:") || shown.AllowedNow {
		t.Fatalf("/v1/keys for an API key: %d %s (%v); want it shown as keyhash:HEX and blocked", code, body, err)
	}
	hash := strings.TrimPrefix(shown.Key, "keyhash:")
	code, body = adminDo(t, testClient, "POST", admin+"/v1/reset", "", "application/x-www-form-urlencoded", url.Values{"rule": {"search"}, "key": {"key:" + hash}}.Encode())
	if code != 404 || !strings.Contains(body, `"reset": false`) || !strings.Contains(body, "no record") {
		t.Errorf("POST /v1/reset of key:<the hash>: %d %s; want 404, reset false: it names a raw API key", code, body)
	}
	if got := codes(t, 1, "GET", search, "X-API-Key", "sk_live_2"); got[0] != 429 {
		t.Errorf("sk_live_2 after a reset that found nothing: %v, want still blocked", got)
	}
	code, body = adminDo(t, testClient, "POST", admin+"/v1/reset", "", "application/x-www-form-urlencoded", url.Values{"rule": {"search"}, "key": {shown.Key}}.Encode())
	if code != 200 || !strings.Contains(body, `"reset": true`) || !strings.Contains(body, `"key": "`+shown.Key+`"`) {
		t.Errorf("POST /v1/reset of the key /v1/keys showed: %d %s", code, body)
	}
	if got := codes(t, 1, "GET", search, "X-API-Key", "sk_live_2"); got[0] != 200 {
		t.Errorf("sk_live_2 after the reset of %s: %v", shown.Key, got)
	}
	if !strings.Contains(s.stderr.String(), "key="+shown.Key) {
		t.Errorf("the reset's log line does not name %s:\n%s", shown.Key, s.stderr)
	}

	// Mistakes are named.
	for _, c := range []struct {
		method, path, ctype, body string
		code                      int
		want                      string
	}{
		{"POST", "/v1/reset", "application/json", `{"rule":"nope","key":"user:a"}`, 404, `no rule named \"nope\"`},
		{"POST", "/v1/reset", "application/json", `{"rule":"search","key":"alice"}`, 400, "key: sluice/identity: bad caller key"},
		{"POST", "/v1/reset", "application/json", `{"rule":`, 400, "want a JSON object"},
		{"POST", "/v1/reset", "application/x-www-form-urlencoded", "rule=search", 400, "give rule and key"},
		{"GET", "/v1/keys?rule=search", "", "", 400, "give rule and key"},
		{"GET", "/v1/reset", "", "", 405, ""},
	} {
		code, body := adminDo(t, testClient, c.method, admin+c.path, "", c.ctype, c.body)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s %s %s: %d %q, want %d with %q", c.method, c.path, c.body, code, body, c.code, c.want)
		}
	}
}

// ownAddress returns an IPv4 address of this machine that is not
// loopback, or "" when it has none.
func ownAddress() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

// Off loopback the admin listener needs a token: serve refuses to start
// without one; with one, every endpoint but /healthz answers 401 to a
// request without the right token, from another address than loopback.
func TestAdminToken(t *testing.T) {
	up := upstream(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfgPath, adminConfig)
	base := []string{"--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL}

	run := func(args ...string) (int, string) {
		var stderr strings.Builder
		code := runServe(context.Background(), append(append([]string{}, base...), args...), io.Discard, &stderr, nil)
		return code, stderr.String()
	}
	// Serve does not start on a non-loopback address without a token,
	// nor with a token too short to be a secret.
	if code, out := run("--admin", "0.0.0.0:0"); code != 2 || !strings.Contains(out, "not loopback") || !strings.Contains(out, "--admin-token-file") {
		t.Errorf("--admin 0.0.0.0:0 without a token: exit %d\n%s\nwant 2 naming --admin-token-file", code, out)
	}
	if code, out := run("--admin-token-file", filepath.Join(dir, "none")); code != 2 || !strings.Contains(out, "only with --admin") {
		t.Errorf("--admin-token-file without --admin: exit %d\n%s\nwant 2", code, out)
	}
	short := filepath.Join(dir, "short")
	writeFile(t, short, "secret\n")
	if code, out := run("--admin", "0.0.0.0:0", "--admin-token-file", short); code != 2 || !strings.Contains(out, "at least 16") {
		t.Errorf("a 6-byte token: exit %d\n%s\nwant 2", code, out)
	}

	const token = "0123456789abcdef0123456789abcdef"
	tokenPath := filepath.Join(dir, "token")
	writeFile(t, tokenPath, token+"\n")
	// Bind the machine's own address when it has one, and call it there:
	// the request comes from that address, not loopback. Without one,
	// bind every address and call from 127.0.0.2.
	bind, client := "0.0.0.0:0", &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	own := ownAddress()
	if own != "" {
		bind, client = net.JoinHostPort(own, "0"), testClient
	}
	s := startServe(t, append(append([]string{}, base...), "--admin", bind, "--admin-token-file", tokenPath)...)
	_, port, _ := net.SplitHostPort(s.admin)
	host := own
	if host == "" {
		host = "127.0.0.1"
	}
	admin := "http://" + net.JoinHostPort(host, port)
	if got := codes(t, 4, "POST", "http://"+s.listen+"/api/orders", "X-User-ID", "bob"); fmt.Sprint(got) != "[200 200 200 429]" {
		t.Fatalf("bob's orders: %v", got)
	}
	reset := url.Values{"rule": {"orders-write"}, "key": {"user:bob"}}.Encode()
	form := "application/x-www-form-urlencoded"
	for _, tok := range []string{"", "wrong-token-0123456789abcdef", token + "x", token[:len(token)-1]} {
		for _, c := range []struct{ method, path, ctype, body string }{
			{"POST", "/v1/reset", form, reset},
			{"GET", "/v1/keys?rule=orders-write&key=user:bob", "", ""},
			{"GET", "/metrics", "", ""},
			{"GET", "/rules", "", ""},
		} {
			code, body := adminDo(t, client, c.method, admin+c.path, tok, c.ctype, c.body)
			if code != 401 || body != "unauthorized\n" {
				t.Errorf("%s %s with token %q: %d %q, want 401 and no detail", c.method, c.path, tok, code, body)
			}
		}
	}
	if got := codes(t, 1, "POST", "http://"+s.listen+"/api/orders", "X-User-ID", "bob"); got[0] != 429 {
		t.Fatalf("bob after refused resets: %v, want still 429", got)
	}
	if code, body := adminDo(t, client, "GET", admin+"/healthz", "", "", ""); code != 200 || body != "ok" {
		t.Errorf("/healthz without a token: %d %q, want it open", code, body)
	}
	code, body := adminDo(t, client, "POST", admin+"/v1/reset", token, form, reset)
	if code != 200 {
		t.Fatalf("POST /v1/reset with the token: %d %s", code, body)
	}
	if got := codes(t, 1, "POST", "http://"+s.listen+"/api/orders", "X-User-ID", "bob"); got[0] != 200 {
		t.Errorf("bob after the reset: %v, want 200", got)
	}
	if code, _ := adminDo(t, client, "GET", admin+"/metrics", token, "", ""); code != 200 {
		t.Errorf("/metrics with the token: %d", code)
	}
	from := "127.0.0.2"
	if own != "" {
		from = own
	}
	if want := fmt.Sprintf(`msg="sluice serve: admin reset" rule=orders-write key=user:bob remote=%s:`, from); !strings.Contains(s.stderr.String(), want) ||
		!strings.Contains(s.stderr.String(), "token=true") {
		t.Errorf("the log does not show the reset from %s with a token:\n%s", from, s.stderr)
	}
}
