package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/throttled"
)

// serveConfig is a configuration with one token bucket rule, limit a
// minute per user on POST /api/orders, over store (a YAML store section).
func serveConfig(store string, limit int) string {
	return fmt.Sprintf(`store:
%s
on_store_error: open
rules:
  - name: orders-write
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: token_bucket
    limit: %d
    window: 1m
default:
  name: catch-all
  scope: ip
  algorithm: sliding_counter
  limit: 100
  window: 1m
`, store, limit)
}

const memoryStore = "  backend: memory"

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// upstream starts a trivial service that answers 200 "upstream".
func upstream(t *testing.T) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "upstream "+r.Method+" "+r.URL.Path)
	}))
	t.Cleanup(up.Close)
	return up
}

// serving is a runServe running in-process.
type serving struct {
	listen, admin string
	cancel        context.CancelFunc
	done          chan int
	stderr        *bytes.Buffer
}

// startServe runs serve with args and waits until it listens.
func startServe(t *testing.T, args ...string) *serving {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &serving{cancel: cancel, done: make(chan int, 1), stderr: &bytes.Buffer{}}
	readyc := make(chan [2]string, 1)
	go func() {
		s.done <- runServe(ctx, args, io.Discard, s.stderr, func(l, a string) { readyc <- [2]string{l, a} })
	}()
	select {
	case addrs := <-readyc:
		s.listen, s.admin = addrs[0], addrs[1]
	case code := <-s.done:
		cancel()
		t.Fatalf("serve exited with %d before it listened:\n%s", code, s.stderr)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("serve did not start listening within 10s")
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop cancels serve and returns its exit status (once; later calls
// return -1).
func (s *serving) stop(t *testing.T) int {
	t.Helper()
	if s.cancel == nil {
		return -1
	}
	s.cancel()
	s.cancel = nil
	select {
	case code := <-s.done:
		return code
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop within 15s of its context's end")
		return -1
	}
}

var testClient = &http.Client{Timeout: 5 * time.Second}

func post(t *testing.T, url, user string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-User-ID", user)
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := testClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// statuses sends n POSTs to /api/orders as user and returns the statuses.
func statuses(t *testing.T, s *serving, user string, n int) []int {
	t.Helper()
	var out []int
	for range n {
		out = append(out, post(t, "http://"+s.listen+"/api/orders", user).StatusCode)
	}
	return out
}

func countStatus(codes []int, want int) int {
	n := 0
	for _, c := range codes {
		if c == want {
			n++
		}
	}
	return n
}

func TestServe(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfgPath, serveConfig(memoryStore, 5))
	s := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--admin", "127.0.0.1:0")

	// The upstream's answer comes through.
	if code, body := get(t, "http://"+s.listen+"/hello"); code != 200 || body != "upstream GET /hello" {
		t.Errorf("GET /hello = %d %q, want 200 from the upstream", code, body)
	}

	// Five orders allowed, two denied with Retry-After 12: less the whole
	// seconds that passed since the first, which a loaded machine stretches.
	url := "http://" + s.listen + "/api/orders"
	start := time.Now()
	for i := 1; i <= 7; i++ {
		resp := post(t, url, "u-1")
		want := http.StatusOK
		if i > 5 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("POST %d: status %d, want %d", i, resp.StatusCode, want)
		}
		if got := resp.Header.Get("X-RateLimit-Limit"); got != "5" {
			t.Errorf("POST %d: X-RateLimit-Limit %q, want 5", i, got)
		}
		if want == http.StatusTooManyRequests {
			lo := max(1, 11-int(time.Since(start)/time.Second))
			if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < lo || ra > 12 {
				t.Errorf("POST %d: Retry-After %q, want %d to 12 (12 less the seconds since the first order)", i, resp.Header.Get("Retry-After"), lo)
			}
		}
	}

	// The admin endpoints.
	admin := "http://" + s.admin
	if code, body := get(t, admin+"/healthz"); code != 200 || body != "ok" {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}
	rules := readRules(t, admin)
	if rules.Match != "most_specific" || len(rules.Rules) != 1 || rules.Default == nil {
		t.Fatalf("/rules = %+v, want one rule and a default in most_specific mode", rules)
	}
	want := ruleJSON{Name: "orders-write", Method: "POST", PathPrefix: "/api/orders", Scope: "user",
		Algorithm: "token_bucket", Limit: 5, Window: "1m0s", Burst: 0, Cost: 1}
	if rules.Rules[0] != want {
		t.Errorf("/rules rule = %+v, want %+v", rules.Rules[0], want)
	}
	if d := rules.Default; d.Name != "catch-all" || d.Scope != "ip" || d.Algorithm != "sliding_counter" || d.Limit != 100 {
		t.Errorf("/rules default = %+v", *d)
	}
	code, metrics := get(t, admin+"/metrics")
	if code != 200 || !strings.Contains(metrics, "sluice_decisions_total") {
		t.Errorf("/metrics = %d, want 200 with sluice_decisions_total; got:\n%.2000s", code, metrics)
	}
	if !strings.Contains(metrics, `sluice_decisions_total{decision="denied",rule="orders-write"} 2`) {
		t.Errorf("/metrics: want 2 denied decisions for orders-write; got:\n%.4000s", metrics)
	}

	// Raise the limit: a new user gets 10 once the reload is in force.
	writeFile(t, cfgPath, serveConfig(memoryStore, 10))
	deadline := time.Now().Add(20 * time.Second)
	for readRules(t, admin).Rules[0].Limit != 10 {
		if time.Now().After(deadline) {
			t.Fatalf("the raised limit was not in force after 20s; serve said:\n%s", s.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	codes := statuses(t, s, "u-new", 11)
	if countStatus(codes[:10], 200) != 10 || codes[10] != 429 {
		t.Errorf("after the reload, a new user's 11 orders = %v, want 10×200 then 429", codes)
	}

	if code := s.stop(t); code != 0 {
		t.Errorf("serve exited with %d after its context ended, want 0:\n%s", code, s.stderr)
	}
}

func readRules(t *testing.T, admin string) rulesJSON {
	t.Helper()
	code, body := get(t, admin+"/rules")
	if code != 200 {
		t.Fatalf("/rules = %d %q", code, body)
	}
	var r rulesJSON
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("/rules: %v in %q", err, body)
	}
	return r
}

func TestServeRestartKeepsBudget(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sluice.yaml")
	store := fmt.Sprintf("  backend: pebble\n  dir: %s\n  durability: interval\n  flush_interval: 20ms", filepath.Join(dir, "state"))
	writeFile(t, cfgPath, serveConfig(store, 5))
	args := []string{"--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL}

	s := startServe(t, args...)
	if codes := statuses(t, s, "u-2", 6); countStatus(codes[:5], 200) != 5 || codes[5] != 429 {
		t.Fatalf("u-2's orders = %v, want 5×200 then 429", codes)
	}
	if code := s.stop(t); code != 0 {
		t.Fatalf("serve exited with %d, want 0:\n%s", code, s.stderr)
	}

	s = startServe(t, args...)
	if codes := statuses(t, s, "u-2", 1); codes[0] != 429 {
		t.Errorf("after a restart, u-2's order = %d, want 429 (the budget stays spent)", codes[0])
	}
	if codes := statuses(t, s, "u-3", 1); codes[0] != 200 {
		t.Errorf("after a restart, u-3's order = %d, want 200", codes[0])
	}
	if code := s.stop(t); code != 0 {
		t.Errorf("serve exited with %d, want 0:\n%s", code, s.stderr)
	}
}

func TestServeBadConfig(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, cfgPath, strings.Replace(serveConfig(memoryStore, 5), "window: 1m\ndefault", "window: 1 minute\ndefault", 1))
	var stderr bytes.Buffer
	code := runServe(context.Background(), []string{"--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"},
		io.Discard, &stderr, func(string, string) { t.Error("serve listened with an invalid configuration") })
	if code != 2 {
		t.Errorf("exit status %d, want 2", code)
	}
	if msg := stderr.String(); !strings.Contains(msg, cfgPath+":11: rules[0].window") {
		t.Errorf("stderr = %q, want the file, line 11 and rules[0].window", msg)
	}
}

func TestServeUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"},
		{"--config", "x.yaml", "--upstream", "http://127.0.0.1:1"},
		{"--config", "x.yaml", "--listen", "127.0.0.1:0"},
		{"--config", "x.yaml", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:1"},
	} {
		if code := runServe(context.Background(), args, io.Discard, io.Discard, nil); code != 2 {
			t.Errorf("serve %q: exit status %d, want 2", args, code)
		}
	}
}

// The server section's flags are held to the bounds the file's fields are
// (docs/serve.md, slow and idle clients): a value the file refuses is a
// usage error naming the flag, not a setting the flag alone lets through.
func TestServeServerFlagsTakeTheFilesBounds(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfgPath, serveConfig(memoryStore, 5))
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--idle-timeout", "0s"}, "--idle-timeout 0s: want a duration from 1ms to 24h"},
		{[]string{"--idle-timeout", "48h"}, "--idle-timeout 48h0m0s: want a duration from 1ms to 24h"},
		{[]string{"--send-timeout", "500us"}, "--send-timeout 500µs: want a duration from 1ms to 24h"},
		{[]string{"--client-body-timeout", "25h"}, "--client-body-timeout 25h0m0s: want a duration from 1ms to 24h"},
		{[]string{"--client-body-rate-grace", "-1s"}, "--client-body-rate-grace -1s: want a duration from 1ms to 24h"},
		{[]string{"--client-body-min-rate", "-1"}, "--client-body-min-rate -1: want 0 (off) to 1073741824 bytes a second"},
		{[]string{"--client-body-min-rate", "2000000000"}, "--client-body-min-rate 2000000000: want 0 (off) to 1073741824 bytes a second"},
		{[]string{"--max-connections", "0"}, "--max-connections 0: want 1 to 1048576"},
		{[]string{"--max-connections", "2000000"}, "--max-connections 2000000: want 1 to 1048576"},
		// Not a bound, but refused as --admin-token-file is: a name for a
		// listener that is not there.
		{[]string{"--admin-host", "ops.example"}, "--admin-host: only with --admin"},
	} {
		var stderr bytes.Buffer
		args := append([]string{"--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"}, c.flags...)
		ctx, cancel := context.WithCancel(context.Background())
		code := runServe(ctx, args, io.Discard, &stderr, func(string, string) { t.Errorf("serve %q listened", c.flags); cancel() })
		cancel()
		if code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("serve %q: exit status %d, stderr %q; want 2 and %q", c.flags, code, stderr.String(), c.want)
		}
	}
}

// The server section names the listeners and the upstream; a flag given
// overrides its key; a missing or bad one is refused naming the key and
// the flag; the file's bounds are package throttled's.
func TestServeListenersFromFile(t *testing.T) {
	if config.DefaultThrottledPerRule != throttled.DefaultPerRule || config.MaxThrottledPerRule != throttled.MaxPerRule {
		t.Errorf("throttled_per_rule: default %d, bound %d; package throttled's are %d and %d",
			config.DefaultThrottledPerRule, config.MaxThrottledPerRule, throttled.DefaultPerRule, throttled.MaxPerRule)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sluice.yaml")
	run := func(server string, flags ...string) (code int, stderr string, listened bool) {
		writeFile(t, cfgPath, "server:\n"+server+serveConfig(memoryStore, 5))
		var buf bytes.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		code = runServe(ctx, append([]string{"--config", cfgPath}, flags...), io.Discard, &buf, func(_, admin string) {
			listened = admin != ""
			cancel()
		})
		return code, buf.String(), listened
	}
	const up = "  upstream: http://127.0.0.1:1\n"
	// The file alone; a flag over the file's address it could not bind.
	for _, c := range []struct {
		server string
		flags  []string
	}{
		{"  listen: 127.0.0.1:0\n  admin: 127.0.0.1:0\n" + up, nil},
		{"  listen: 192.0.2.1:9\n  admin: 0.0.0.0:0\n" + up, []string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}},
		{"  admin: 127.0.0.1:0\n", []string{"--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"}},
	} {
		if code, stderr, listened := run(c.server, c.flags...); code != 0 || !listened {
			t.Errorf("server %q, flags %q: exit %d, listened %v (with the admin listener), want it to:\n%s", c.server, c.flags, code, listened, stderr)
		}
	}
	for _, c := range []struct {
		server string
		flags  []string
		want   string
	}{
		{up, nil, "--listen is required (or server.listen in " + cfgPath + ")"},
		{"  listen: 127.0.0.1:0\n", nil, "--upstream is required (or server.upstream in " + cfgPath + ")"},
		{"  listen: 127.0.0.1:0\n  admin: 0.0.0.0:0\n" + up, nil, cfgPath + ": server.admin 0.0.0.0:0: 0.0.0.0 is not loopback"},
		{"  listen: 127.0.0.1:0\n  admin_token_file: token\n" + up, nil, "--admin-token-file (server.admin_token_file): only with --admin (server.admin)"},
		{"  listen: 127.0.0.1:0\n" + up, []string{"--admin-host", "ops.example"}, "--admin-host: only with --admin (server.admin)"},
		{"  listen: 127.0.0.1:0\n  usage_listen: 8090\n" + up, nil, "server.usage_listen: want host:port"},
		{"  listen: 127.0.0.1:0\n" + up, []string{"--usage-listen", "8090"}, "--usage-listen 8090: want host:port"},
		{"  listen: 127.0.0.1:0\n" + up, []string{"--upstream", "127.0.0.1:1"}, "--upstream 127.0.0.1:1: want an http or https URL"},
		{"  listen: 127.0.0.1:0\n  tls_cert: server.pem\n" + up, nil, cfgPath + ": server.tls_cert and server.tls_key (or --tls-cert and --tls-key): give both"},
	} {
		if code, stderr, _ := run(c.server, c.flags...); code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("server %q, flags %q: exit %d, stderr %q; want 2 and %q", c.server, c.flags, code, stderr, c.want)
		}
	}
	// The TLS files are read from the file's directory.
	if code, stderr, _ := run("  listen: 127.0.0.1:0\n  tls_cert: server.pem\n  tls_key: server.key\n" + up); code != 1 || !strings.Contains(stderr, filepath.Join(dir, "server.pem")) {
		t.Errorf("TLS files missing: exit %d, stderr %q; want 1 naming %s", code, stderr, filepath.Join(dir, "server.pem"))
	}
}

// A client that goes away before the upstream answers is counted and logged
// at debug level only; a real upstream failure is answered 502, counted and
// logged as an error.
func TestUpstreamErrors(t *testing.T) {
	var logs bytes.Buffer
	u := &upstreamErrors{log: slog.New(slog.NewTextHandler(&logs, nil))} // Info and above
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	gone := httptest.NewRequest("GET", "/x", nil).WithContext(ctx)
	for range 3 {
		u.handle(httptest.NewRecorder(), gone, fmt.Errorf("proxy: %w", context.Canceled))
	}
	if got := u.canceled.Load(); got != 3 {
		t.Errorf("client disconnects counted %d, want 3", got)
	}
	if logs.Len() != 0 {
		t.Errorf("client disconnects logged above debug:\n%s", logs.String())
	}
	w := httptest.NewRecorder()
	u.handle(w, httptest.NewRequest("GET", "/y", nil), errors.New("dial tcp 127.0.0.1:1: connection refused"))
	if w.Code != http.StatusBadGateway || u.failures.Load() != 1 || u.canceled.Load() != 3 {
		t.Errorf("upstream failure: %d, failures %d, disconnects %d; want 502, 1, 3", w.Code, u.failures.Load(), u.canceled.Load())
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("upstream failure not logged as an error:\n%s", logs.String())
	}
	// A canceled error on a request whose client is still there is a
	// failure (the upstream side gave up), not a disconnect.
	u.handle(httptest.NewRecorder(), httptest.NewRequest("GET", "/z", nil), context.Canceled)
	if u.failures.Load() != 2 {
		t.Errorf("canceled with the client present: failures %d, want 2", u.failures.Load())
	}
	// A body the client stopped sending (client_body_timeout) is the
	// client's fault: 408, counted apart.
	b := &timedBody{}
	b.timedOut.Store(true)
	cut := httptest.NewRequest("POST", "/b", nil)
	cut = cut.WithContext(context.WithValue(cut.Context(), bodyTimedOutKey{}, b))
	w = httptest.NewRecorder()
	u.handle(w, cut, errors.New("read tcp: i/o timeout"))
	if w.Code != http.StatusRequestTimeout || u.bodyTimeouts.Load() != 1 || u.failures.Load() != 2 {
		t.Errorf("body timeout: %d, body timeouts %d, failures %d; want 408, 1, 2", w.Code, u.bodyTimeouts.Load(), u.failures.Load())
	}
	// The three counters reach /metrics.
	if n := testutil.CollectAndCount(u); n != 3 {
		t.Errorf("collector exports %d series, want 3", n)
	}
}
