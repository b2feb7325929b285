package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice/httplimit"
)

// usageConfig is a SaaS gateway: orders 3 an hour per user, 10 for
// premium callers (the plan from the trusted loopback's X-Sluice-Plan),
// search 5 a minute per IP address, reports 50 an hour per organisation
// (the X-Org-ID header, from the trusted loopback), exports 100 a UTC day
// per user.
const usageConfig = `identity:
  trusted_proxies: [127.0.0.1/32]
  plan_header: X-Sluice-Plan
rules:
  - name: orders
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: token_bucket
    limit: 3
    window: 1h
  - name: orders-premium
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: token_bucket
    limit: 10
    window: 1h
    plan: premium
  - name: search
    method: GET
    path_prefix: /api/search
    scope: ip
    algorithm: fixed_window
    limit: 5
    window: 1m
  - name: reports
    method: POST
    path_prefix: /api/reports
    scope: header:X-Org-ID
    algorithm: fixed_window
    limit: 50
    window: 1h
  - name: exports
    method: GET
    path_prefix: /api/exports
    scope: user
    algorithm: fixed_window
    limit: 100
    calendar: day
    timezone: UTC
`

var usageAddrRE = regexp.MustCompile(`msg="sluice serve: listening" listen=\S+ admin=(\S+) usage=(\S+)`)

// authGet sends GET url with the bearer token (none when empty) and
// headers (name, value pairs), and returns the status and body.
func authGet(t *testing.T, token, u string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// decodeUsage decodes a usage body, by rule.
func decodeUsage(t *testing.T, body string) (httplimit.UsageBody, map[string]httplimit.LimitBody) {
	t.Helper()
	var u httplimit.UsageBody
	if err := json.Unmarshal([]byte(body), &u); err != nil {
		t.Fatalf("%v in %s", err, body)
	}
	by := map[string]httplimit.LimitBody{}
	for _, l := range u.Limits {
		by[l.Rule] = l
	}
	return u, by
}

// usageServer is the server section TestServeProcessUsage starts from: the
// listeners in the file, its listen overridden by --listen (the address
// here is not one the test machine can bind), the token file relative to
// the file's directory.
const usageServer = `server:
  listen: 192.0.2.1:9
  upstream: %s
  admin: 127.0.0.1:0
  admin_token_file: token
  usage_listen: 127.0.0.1:%d
  throttled_per_rule: %d
`

// Through a real serve process, its listeners named by the configuration's
// server section (--listen over the file's): the admin's usage of a named caller (with
// the token only), which the next request agrees with and which writes no
// record; the customer listener's, for the request's own caller only; the
// live throttled list, bounded and paged; hostile queries refused; and no
// caller in the metrics. A reload that changes a listener's address or the
// list's bound is logged as waiting for a restart, and changes neither.
func TestServeProcessUsage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	up := upstream(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfgPath, fmt.Sprintf(usageServer, up.URL, 0, 8)+usageConfig)
	const token = "0123456789abcdef0123456789abcdef"
	writeFile(t, filepath.Join(dir, "token"), token+"\n")
	p := startServeProcess(t, bin, "--config", cfgPath, "--listen", "127.0.0.1:0")
	m := usageAddrRE.FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no admin and usage addresses in the log:\n%s", p.stderr)
	}
	admin, own := "http://"+m[1], "http://"+m[2]
	orders := "http://" + p.listen + "/api/orders"

	// alice spends her 3 orders and is denied a 4th.
	if got := codes(t, 4, "POST", orders, "X-User-ID", "alice"); fmt.Sprint(got) != "[200 200 200 429]" {
		t.Fatalf("alice's orders: %v", got)
	}

	// The admin's usage asks for the token.
	if code, _ := authGet(t, "", admin+"/v1/usage?user=alice&ip=127.0.0.1"); code != http.StatusUnauthorized {
		t.Errorf("/v1/usage without the token: %d, want 401", code)
	}
	if code, _ := authGet(t, "", admin+"/v1/throttled"); code != http.StatusUnauthorized {
		t.Errorf("/v1/throttled without the token: %d, want 401", code)
	}
	code, body := authGet(t, token, admin+"/v1/usage?user=alice&ip=127.0.0.1")
	if code != http.StatusOK {
		t.Fatalf("/v1/usage: %d %s", code, body)
	}
	_, by := decodeUsage(t, body)
	if o := by["orders"]; o.Key != "user:alice" || o.Remaining != 0 || o.Allowed || o.RetryAfterSeconds <= 0 || o.Limit != 3 || o.WindowSeconds != 3600 {
		t.Errorf("alice's orders: %+v, want none left, denied, a retry", o)
	}
	if s := by["search"]; s.Key != "ip:127.0.0.1" || s.Remaining != 5 || !s.Allowed {
		t.Errorf("alice's search: %+v, want ip:127.0.0.1 with 5 left", s)
	}
	if _, ok := by["orders-premium"]; ok {
		t.Errorf("a caller on no plan is shown the premium rule: %s", body)
	}
	// A calendar rule resets at its boundary exactly: the next UTC midnight
	// after the answer's instant, in /v1/usage and in /v1/keys alike.
	if got := codes(t, 1, "GET", "http://"+p.listen+"/api/exports", "X-User-ID", "alice"); fmt.Sprint(got) != "[200]" {
		t.Fatalf("alice's export: %v", got)
	}
	u, by := decodeUsage(t, mustOK(t, token, admin+"/v1/usage?user=alice&ip=127.0.0.1"))
	at, err := time.Parse(time.RFC3339Nano, u.At)
	if err != nil {
		t.Fatal(err)
	}
	midnight := at.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour).Format(time.RFC3339Nano)
	if e := by["exports"]; e.Remaining != 99 || e.ResetAt != midnight {
		t.Errorf("alice's exports at %s: %d left until %s, want 99 until %s", u.At, e.Remaining, e.ResetAt, midnight)
	}
	var keyState struct {
		FullAt string `json:"full_at"`
	}
	if err := json.Unmarshal([]byte(mustOK(t, token, admin+"/v1/keys?rule=exports&key=user:alice")), &keyState); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(keyState.FullAt, "T00:00:00Z") {
		t.Errorf("/v1/keys: alice's exports full at %s, want a UTC midnight", keyState.FullAt)
	}

	// On the premium plan, the premium rule in place of orders; a request's
	// rules alone with its path.
	_, by = decodeUsage(t, mustOK(t, token, admin+"/v1/usage?user=alice&ip=127.0.0.1&plan=premium&method=POST&path=/api/orders/7"))
	if len(by) != 1 || by["orders-premium"].Remaining != 10 {
		t.Errorf("alice on premium, POST /api/orders/7: %+v, want orders-premium alone, 10 left", by)
	}

	// An organisation's budget, named by the header its proxy sets.
	reports := "http://" + p.listen + "/api/reports"
	if got := codes(t, 2, "POST", reports, "X-Org-ID", "acme"); fmt.Sprint(got) != "[200 200]" {
		t.Fatalf("acme's reports: %v", got)
	}
	_, by = decodeUsage(t, mustOK(t, token, admin+"/v1/usage?header.X-Org-ID=acme&ip=127.0.0.1&method=POST&path=/api/reports"))
	if r := by["reports"]; r.Key != "header:acme" || r.Remaining != 48 || r.Scope != "header:X-Org-Id" {
		t.Errorf("acme's reports: %+v, want header:acme with 48 left", r)
	}
	for _, q := range []string{"header.X-Org-ID=acme", "header.Bad%20Name=1", "header.=1", "header.X-Org-ID=a%01b&ip=127.0.0.1", "user=a%0Ab&ip=127.0.0.1", "api_key=%7F&ip=127.0.0.1"} {
		if code, body := authGet(t, token, admin+"/v1/usage?"+q); code != http.StatusBadRequest {
			t.Errorf("/v1/usage?%s: %d %s, want 400", q, code, body)
		}
	}

	// zed has spent nothing: usage says 3, writes no record, and the next
	// order leaves 2.
	_, by = decodeUsage(t, mustOK(t, token, admin+"/v1/usage?user=zed&ip=127.0.0.1"))
	if by["orders"].Remaining != 3 {
		t.Errorf("zed: %+v, want 3 left", by["orders"])
	}
	if code, body := authGet(t, token, admin+"/v1/keys?rule=orders&key=user:zed"); code != http.StatusOK || !strings.Contains(body, `"record": null`) {
		t.Errorf("/v1/keys for zed after reading his usage: %d %s, want no record", code, body)
	}
	if _, h := send(t, "POST", orders, "X-User-ID", "zed"); h.Get("X-RateLimit-Remaining") != "2" {
		t.Errorf("zed's first order left %q, want 2", h.Get("X-RateLimit-Remaining"))
	}

	// Hostile or wrong queries are refused, briefly.
	long := strings.Repeat("u", 100_000)
	for _, q := range []string{"user=" + long + "&ip=127.0.0.1", "bogus=1", long + "=1", "ip=not-an-ip", "user=alice&path=x",
		"user=alice&path=/x&method=" + url.QueryEscape("G T"), "user=alice&plan=" + url.QueryEscape("no such plan!"), "user=a&user=b", "user=alice"} {
		code, body := authGet(t, token, admin+"/v1/usage?"+q)
		if code != http.StatusBadRequest || len(body) > 1000 || !strings.Contains(body, `"error"`) {
			t.Errorf("/v1/usage?%.60s: %d %.300s, want a short 400", q, code, body)
		}
	}

	// The customer listener answers for the request's own caller only.
	code, body = authGet(t, "", own+"/v1/usage", "X-User-ID", "alice")
	if _, by := decodeUsage(t, body); code != http.StatusOK || by["orders"].Key != "user:alice" || by["orders"].Remaining != 0 {
		t.Errorf("own usage of alice: %d %s", code, body)
	}
	for _, q := range []string{"user=bob", "api_key=k", "ip=192.0.2.1", "plan=premium", "keyhash=00"} {
		if code, body := authGet(t, "", own+"/v1/usage?"+q, "X-User-ID", "alice"); code != http.StatusBadRequest || !strings.Contains(body, "own identity only") {
			t.Errorf("own usage naming a caller (%s): %d %s, want 400", q, code, body)
		}
	}
	for _, path := range []string{"/v1/keys?rule=orders&key=user:alice", "/v1/throttled", "/metrics", "/v1/reset"} {
		if code, _ := authGet(t, token, own+path); code != http.StatusNotFound {
			t.Errorf("the usage listener answers %s: %d, want 404", path, code)
		}
	}

	// Twelve more callers denied: the list keeps 8, paged by 3.
	for i := range 12 {
		codes(t, 4, "POST", orders, "X-User-ID", fmt.Sprintf("u%02d", i))
	}
	var keys []string
	cursor, total := "", 0
	for pages := 0; pages < 10; pages++ {
		var page throttledJSON
		body := mustOK(t, token, admin+"/v1/throttled?rule=orders&limit=3&cursor="+cursor)
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Callers) > 3 {
			t.Fatalf("a page of %d callers, want at most 3", len(page.Callers))
		}
		for _, c := range page.Callers {
			if c.Rule != "orders" || !c.DeniedNow || c.Denied != 1 {
				t.Errorf("listed %+v, want a caller of orders denied once, now", c)
			}
			keys = append(keys, c.Key)
		}
		total = page.Total
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if total != 8 || len(keys) != 8 {
		t.Errorf("the list holds %d callers, %d listed in pages (%v), want 8: its bound", total, len(keys), keys)
	}
	for _, q := range []string{"rule=nope", "limit=0", "limit=100000", "cursor=zz", "who=1"} {
		if code, body := authGet(t, token, admin+"/v1/throttled?"+q); code/100 != 4 || !strings.Contains(body, `"error"`) {
			t.Errorf("/v1/throttled?%s: %d %s, want a 4xx", q, code, body)
		}
	}

	// A reload moving the usage listener and lowering the list's bound is
	// logged as waiting for a restart: the listener stays where it is, the
	// list keeps its 8. The same reload moves exports' days to Kolkata's:
	// alice's one export stays spent (any part of one unit, rounded up, is
	// one), and her day ends at Kolkata's midnight.
	writeFile(t, cfgPath, fmt.Sprintf(usageServer, up.URL, 1, 3)+strings.Replace(usageConfig, "timezone: UTC", "timezone: Asia/Kolkata", 1))
	p.cmd.Process.Signal(syscall.SIGHUP)
	if !waitLogged(p.stderr, "the server section changed; it takes effect only after a restart") {
		t.Fatalf("a changed server section is not logged:\n%s", p.stderr)
	}
	if code, body := authGet(t, "", own+"/v1/usage", "X-User-ID", "alice"); code != http.StatusOK {
		t.Errorf("own usage after the reload: %d %s", code, body)
	}
	var page throttledJSON
	if err := json.Unmarshal([]byte(mustOK(t, token, admin+"/v1/throttled?rule=orders&limit=100")), &page); err != nil || page.Total != 8 {
		t.Errorf("the list after the reload: %+v (%v), want its 8", page, err)
	}
	u, by = decodeUsage(t, mustOK(t, token, admin+"/v1/usage?user=alice&ip=127.0.0.1"))
	if at, err = time.Parse(time.RFC3339Nano, u.At); err != nil {
		t.Fatal(err)
	}
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	k := at.In(kolkata)
	midnight = time.Date(k.Year(), k.Month(), k.Day()+1, 0, 0, 0, 0, kolkata).UTC().Format(time.RFC3339Nano)
	if e := by["exports"]; e.Timezone != "Asia/Kolkata" || e.Remaining != 99 || e.ResetAt != midnight {
		t.Errorf("alice's exports after the zone moved, at %s: %+v, want 99 left until %s", u.At, e, midnight)
	}

	// No caller in the metrics.
	metricsBody := mustOK(t, token, admin+"/metrics")
	for _, who := range []string{"alice", "zed", "u00", "user:", "127.0.0.1"} {
		if strings.Contains(metricsBody, who) {
			t.Errorf("/metrics names %q", who)
		}
	}
}

// mustOK GETs url with the token and returns its body, failing unless 200.
func mustOK(t *testing.T, token, u string) string {
	t.Helper()
	code, body := authGet(t, token, u)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", u, code, body)
	}
	return body
}
