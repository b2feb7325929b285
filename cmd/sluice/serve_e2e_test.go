package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The end-to-end tests below run `serve` in-process over real loopback
// HTTP, in front of a real upstream, with configuration files on disk.

// gatewayConfig is the configuration file with the store section
// given (a YAML store section) and the identity section's trusted proxies.
func gatewayConfig(store, trusted string, catchAll int) string {
	return fmt.Sprintf(`store:
%s
identity:
  user_header: X-User-ID
  api_key_header: X-API-Key
  trusted_proxies: [%s]
  ipv6_prefix: 64
on_store_error: open
match: most_specific
rules:
  - name: orders-write
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: token_bucket
    limit: 5
    window: 1m
  - name: search
    method: GET
    path_prefix: /api/search
    scope: user
    algorithm: sliding_counter
    limit: 10
    window: 1m
    cost: 5
default:
  name: catch-all
  scope: ip
  algorithm: sliding_counter
  limit: %d
  window: 1m
`, store, trusted, catchAll)
}

// send makes one request and returns its status and headers; hdr is
// name, value pairs.
func send(t *testing.T, method, url string, hdr ...string) (int, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// codes sends n requests and returns their statuses.
func codes(t *testing.T, n int, method, url string, hdr ...string) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		out[i], _ = send(t, method, url, hdr...)
	}
	return out
}

// metricValue reads one sample from serve's /metrics: the line starting
// with series (name and labels as Prometheus prints them); 0 if absent.
func metricValue(t *testing.T, admin, series string) float64 {
	t.Helper()
	_, body := get(t, "http://"+admin+"/metrics")
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("/metrics %s: %v", series, err)
	}
	return v
}

// waitMetric polls series until it reaches want, for up to 20s: it
// returns as soon as the series does, and the bound is only how long a
// loaded machine may take to schedule a reload (the watcher's debounce,
// reading the file until it has settled for --reload-settle, checking it)
// before the test calls it missed.
func waitMetric(t *testing.T, admin, series string, want float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := metricValue(t, admin, series)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v after 20s, want %v", series, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// replaceFile writes data to path the way editors and config management
// do: a new file renamed over the old one.
func replaceFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// The article's gateway scenarios, through serve.
func TestServeGatewayScenarios(t *testing.T) {
	up := upstream(t)
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfgPath, gatewayConfig(memoryStore, "127.0.0.1/32", 100))
	s := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--admin", "127.0.0.1:0")
	base := "http://" + s.listen

	// Orders: five allowed, then two denied with Retry-After 12.
	got := codes(t, 5, "POST", base+"/api/orders", "X-User-ID", "alice")
	if countStatus(got, 200) != 5 {
		t.Fatalf("alice's first five orders: %v, want 200s", got)
	}
	for range 2 {
		code, h := send(t, "POST", base+"/api/orders", "X-User-ID", "alice")
		if code != 429 {
			t.Fatalf("alice's 6th/7th order: %d, want 429", code)
		}
		// Retry-After is whole seconds rounded up: 12 unless a second
		// boundary of the real clock was crossed since the first order.
		if ra := h.Get("Retry-After"); ra != "12" && ra != "11" {
			t.Errorf("Retry-After %q, want 12", ra)
		}
		if p := h.Get("RateLimit-Policy"); p != `"orders-write";q=5;w=60` {
			t.Errorf("RateLimit-Policy %q", p)
		}
	}
	// The same user on another route has its own budget; cost 5 against
	// a limit of 10 is 200, 200, 429.
	if got := codes(t, 3, "GET", base+"/api/search", "X-User-ID", "alice"); fmt.Sprint(got) != "[200 200 429]" {
		t.Errorf("alice's searches: %v, want [200 200 429]", got)
	}
	// An anonymous caller is keyed by its IP under the default rule.
	code, h := send(t, "GET", base+"/api/products")
	if code != 200 || h.Get("X-RateLimit-Limit") != "100" || h.Get("X-RateLimit-Remaining") != "99" {
		t.Errorf("anonymous GET: %d, limit %q remaining %q, want 200 under catch-all 100/99",
			code, h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"))
	}
	// Anonymous under a user rule falls back to its IP: its own budget,
	// not alice's.
	if code, _ := send(t, "POST", base+"/api/orders"); code != 200 {
		t.Errorf("an anonymous order: %d, want 200 (keyed by IP)", code)
	}
	// Per-rule counters.
	for series, want := range map[string]float64{
		`sluice_decisions_total{decision="allowed",rule="orders-write"}`: 6,
		`sluice_decisions_total{decision="denied",rule="orders-write"}`:  2,
		`sluice_decisions_total{decision="allowed",rule="search"}`:       2,
		`sluice_decisions_total{decision="denied",rule="search"}`:        1,
		`sluice_decisions_total{decision="allowed",rule="catch-all"}`:    1,
	} {
		if got := metricValue(t, s.admin, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}

// X-Forwarded-For is believed from a trusted peer only; IPv6 callers in
// one /64 share a budget.
func TestServeForwardedFor(t *testing.T) {
	up := upstream(t)
	dir := t.TempDir()

	t.Run("untrusted peer", func(t *testing.T) {
		cfgPath := filepath.Join(dir, "untrusted.yaml")
		writeFile(t, cfgPath, gatewayConfig(memoryStore, "10.0.0.0/8", 3))
		s := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL)
		// A client inventing a new address each time gets no new budget.
		var got []int
		for i := range 5 {
			code, _ := send(t, "GET", "http://"+s.listen+"/x", "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
			got = append(got, code)
		}
		if fmt.Sprint(got) != "[200 200 200 429 429]" {
			t.Errorf("spoofed X-Forwarded-For from an untrusted peer: %v, want 3 allowed then 429s", got)
		}
	})

	t.Run("trusted peer", func(t *testing.T) {
		cfgPath := filepath.Join(dir, "trusted.yaml")
		writeFile(t, cfgPath, gatewayConfig(memoryStore, "127.0.0.1/32", 3))
		s := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL)
		url := "http://" + s.listen + "/x"
		// Each forwarded client has its own budget of 3...
		if got := codes(t, 4, "GET", url, "X-Forwarded-For", "203.0.113.7"); fmt.Sprint(got) != "[200 200 200 429]" {
			t.Errorf("client 203.0.113.7: %v", got)
		}
		if got := codes(t, 1, "GET", url, "X-Forwarded-For", "203.0.113.8"); got[0] != 200 {
			t.Errorf("client 203.0.113.8: %v, want its own budget", got)
		}
		// ...and the right-most untrusted address counts: an address the
		// client put to its left buys nothing.
		if got := codes(t, 1, "GET", url, "X-Forwarded-For", "192.0.2.1, 203.0.113.7"); got[0] != 429 {
			t.Errorf("spoofed left-most address: %v, want 429 (client is still 203.0.113.7)", got)
		}
		// RFC 7239 Forwarded is not read: the proxy maintains
		// X-Forwarded-For, and a Forwarded header is whatever the client
		// wrote. It buys 203.0.113.7 no fresh budget...
		if got := codes(t, 1, "GET", url, "X-Forwarded-For", "203.0.113.7", "Forwarded", `for=203.0.113.9`); got[0] != 429 {
			t.Errorf("Forwarded for=203.0.113.9 from 203.0.113.7: %v, want 429", got)
		}
		// ...and does not put the client on the proxy's own key.
		if got := codes(t, 3, "GET", url, "X-Forwarded-For", "203.0.113.10", "Forwarded", `for=127.0.0.1`); fmt.Sprint(got) != "[200 200 200]" {
			t.Errorf("Forwarded naming the proxy: %v, want 203.0.113.10's own budget of 3", got)
		}
		// Two addresses in one IPv6 /64 share a budget; another /64 does
		// not.
		a := codes(t, 2, "GET", url, "X-Forwarded-For", "2001:db8:1:2::1")
		b := codes(t, 2, "GET", url, "X-Forwarded-For", "2001:db8:1:2:ffff:ffff:ffff:fffe")
		c := codes(t, 1, "GET", url, "X-Forwarded-For", "2001:db8:1:3::1")
		if fmt.Sprint(a, b, c) != "[200 200] [200 429] [200]" {
			t.Errorf("IPv6: one /64 %v then %v, another /64 %v; want [200 200] [200 429] [200]", a, b, c)
		}
		// IPv4-mapped IPv6 is IPv4.
		if got := codes(t, 1, "GET", url, "X-Forwarded-For", "::ffff:203.0.113.8"); got[0] != 200 {
			t.Errorf("::ffff:203.0.113.8: %v, want 200 (203.0.113.8 has 2 left)", got)
		}
		if got := codes(t, 2, "GET", url, "X-Forwarded-For", "203.0.113.8"); fmt.Sprint(got) != "[200 429]" {
			t.Errorf("203.0.113.8 after its mapped form: %v, want [200 429] (one budget)", got)
		}
		// A right-most entry that does not parse is refused, never
		// counted on the proxy's own address.
		if got := codes(t, 4, "GET", url, "X-Forwarded-For", "203.0.113.11, garbage"); fmt.Sprint(got) != "[400 400 400 400]" {
			t.Errorf("X-Forwarded-For ending in garbage: %v, want 400s", got)
		}
		// Nothing above was counted under the proxy's own address.
		if got := codes(t, 3, "GET", url); fmt.Sprint(got) != "[200 200 200]" {
			t.Errorf("the proxy's own requests: %v, want its full budget of 3", got)
		}
	})

	t.Run("trusted peer setting Forwarded", func(t *testing.T) {
		cfgPath := filepath.Join(dir, "forwarded.yaml")
		writeFile(t, cfgPath, strings.Replace(gatewayConfig(memoryStore, "127.0.0.1/32", 1), "  ipv6_prefix: 64\n", "  ipv6_prefix: 64\n  forwarding_header: forwarded\n", 1))
		s := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL)
		url := "http://" + s.listen + "/x"
		// RFC 7239 Forwarded is read, IPv6 in quotes and brackets...
		if got := codes(t, 2, "GET", url, "Forwarded", `for=203.0.113.7;proto=https`); fmt.Sprint(got) != "[200 429]" {
			t.Errorf("Forwarded for=203.0.113.7: %v, want [200 429]", got)
		}
		if got := codes(t, 1, "GET", url, "Forwarded", `for="[2001:db8:1:3::1]:443"`); got[0] != 200 {
			t.Errorf("Forwarded IPv6: %v, want 200", got)
		}
		// ...and X-Forwarded-For is not: it buys no fresh budget.
		if got := codes(t, 1, "GET", url, "Forwarded", "for=203.0.113.7", "X-Forwarded-For", "198.51.100.1"); got[0] != 429 {
			t.Errorf("X-Forwarded-For beside Forwarded: %v, want 429", got)
		}
		// A Forwarded header that does not say who the client is (a
		// quoted-string left open swallows the element a proxy appended) is
		// refused, and nothing lands on the proxy's own address.
		for _, f := range []string{`for="x`, `for="x, for=203.0.113.20`, "for=unknown", "for=203.0.113.21, proto=https"} {
			if got := codes(t, 2, "GET", url, "Forwarded", f); fmt.Sprint(got) != "[400 400]" {
				t.Errorf("Forwarded %s: %v, want [400 400]", f, got)
			}
		}
		if got := codes(t, 1, "GET", url); got[0] != 200 {
			t.Errorf("the proxy's own request: %v, want 200 (its budget untouched)", got)
		}
	})
}

// In "all" mode a request spends nothing unless every matching rule allows
// it; a reload that raises a limit keeps what was spent.
func TestServeAllMode(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	cfgPath := filepath.Join(t.TempDir(), "all.yaml")
	cfg := func(global int) string {
		return fmt.Sprintf(`store:
  backend: memory
match: all
rules:
  - name: orders-user
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: token_bucket
    limit: 3
    window: 1h
  - name: orders-global
    method: "*"
    path_prefix: /api
    scope: global
    algorithm: fixed_window
    limit: %d
    window: 1h
`, global)
	}
	writeFile(t, cfgPath, cfg(2))
	s := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--admin", "127.0.0.1:0")
	url := "http://" + s.listen + "/api/orders"

	if got := codes(t, 4, "POST", url, "X-User-ID", "u1"); fmt.Sprint(got) != "[200 200 429 429]" {
		t.Fatalf("u1's orders under a global limit of 2: %v", got)
	}
	// Raise the global limit. The two denials must not have charged
	// orders-user: u1 has exactly one order left (3 - 2), and the global
	// rule keeps its 2 spent.
	replaceFile(t, cfgPath, cfg(100))
	waitMetric(t, s.admin, `sluice_config_reloads_total{result="ok"}`, 1)
	if got := codes(t, 2, "POST", url, "X-User-ID", "u1"); fmt.Sprint(got) != "[200 429]" {
		t.Errorf("u1 after the global limit was raised: %v, want [200 429]", got)
	}
	_, h := send(t, "GET", "http://"+s.listen+"/api/other", "X-User-ID", "u2")
	if got := h.Get("X-RateLimit-Remaining"); got != "96" {
		t.Errorf("orders-global remaining after 3 allowed and 1 more: %q, want 96 (the spent budget kept)", got)
	}
}

// A reload takes effect within a second with no restart; an invalid file
// keeps the rules in force; the identity section reloads too.
func TestServeReload(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfgPath, gatewayConfig(memoryStore, "10.0.0.0/8", 3))
	s := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--admin", "127.0.0.1:0")
	url := "http://" + s.listen + "/x"
	ok := `sluice_config_reloads_total{result="ok"}`
	bad := `sluice_config_reloads_total{result="error"}`

	if got := codes(t, 4, "GET", url); fmt.Sprint(got) != "[200 200 200 429]" {
		t.Fatalf("catch-all of 3: %v", got)
	}

	// An invalid file is rejected whole: the old rules stay.
	replaceFile(t, cfgPath, strings.Replace(gatewayConfig(memoryStore, "10.0.0.0/8", 50), "limit: 5\n", "limit: -5\n", 1))
	waitMetric(t, s.admin, bad, 1)
	if r := readRules(t, "http://"+s.admin); r.Default.Limit != 3 || r.Rules[0].Limit != 5 {
		t.Errorf("/rules after an invalid reload: %+v, want the old rules", r)
	}
	if got := codes(t, 1, "GET", url); got[0] != 429 {
		t.Errorf("after an invalid reload: %v, want 429 under the old limit", got)
	}

	// A valid one raising the limit applies on its own, the file's change
	// seen by the watcher (no signal, no request); the spent budget is
	// kept (3 of 10 spent).
	start := time.Now()
	replaceFile(t, cfgPath, gatewayConfig(memoryStore, "10.0.0.0/8", 10))
	waitMetric(t, s.admin, ok, 1)
	t.Logf("the reload was in force %v after the file was replaced", time.Since(start))
	if got := codes(t, 8, "GET", url); fmt.Sprint(got) != "[200 200 200 200 200 200 200 429]" {
		t.Errorf("after raising the limit to 10: %v, want 7 allowed (3 spent before)", got)
	}

	// The identity section reloads: trusting the local proxy makes
	// X-Forwarded-For count.
	if got := codes(t, 1, "GET", url, "X-Forwarded-For", "203.0.113.9"); got[0] != 429 {
		t.Fatalf("X-Forwarded-For before trusting the peer: %v, want 429 (keyed by the peer)", got)
	}
	replaceFile(t, cfgPath, gatewayConfig(memoryStore, "127.0.0.1/32", 10))
	waitMetric(t, s.admin, ok, 2)
	if got := codes(t, 1, "GET", url, "X-Forwarded-For", "203.0.113.9"); got[0] != 200 {
		t.Errorf("X-Forwarded-For after trusting the peer: %v, want 200 (keyed by the client)", got)
	}

	// The exempt list and the response section reload too: the blocked
	// peer exempt, another caller denied with the status and body asked.
	if got := codes(t, 1, "GET", url); got[0] != 429 {
		t.Fatalf("the peer before the exemption: %v, want 429", got)
	}
	replaceFile(t, cfgPath, gatewayConfig(memoryStore, "127.0.0.1/32", 10)+"exempt: [ip:127.0.0.0/8]\nresponse: {deny_status: 503, body: problem}\n")
	waitMetric(t, s.admin, ok, 3)
	if got := codes(t, 3, "GET", url); fmt.Sprint(got) != "[200 200 200]" {
		t.Errorf("the exempt peer: %v, want every request through", got)
	}
	for range 10 {
		send(t, "GET", url, "X-Forwarded-For", "203.0.113.7")
	}
	if code, h := send(t, "GET", url, "X-Forwarded-For", "203.0.113.7"); code != 503 || h.Get("Content-Type") != "application/problem+json" {
		t.Errorf("a denial after the response section: %d %q, want 503 and problem details", code, h.Get("Content-Type"))
	}
}

// serveProcess is `sluice serve` running as a child process.
type serveProcess struct {
	cmd    *exec.Cmd
	listen string
	exited chan error
	stderr *syncBuffer
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var listeningRE = regexp.MustCompile(`msg="sluice serve: listening" listen=(\S+)`)

// startServeProcess starts bin serve with args and waits until its log
// says where it listens.
func startServeProcess(t *testing.T, bin string, args ...string) *serveProcess {
	t.Helper()
	p := &serveProcess{cmd: exec.Command(bin, append([]string{"serve"}, args...)...), exited: make(chan error, 1), stderr: &syncBuffer{}}
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := listeningRE.FindStringSubmatch(p.stderr.String()); m != nil {
			p.listen = m[1]
			return p
		}
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("serve exited (%v) before it listened:\n%s", err, p.stderr)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not listen within 10s:\n%s", p.stderr)
		}
	}
}

// wait returns the process's exit error once it has exited, failing the
// test if that takes longer than d.
func (p *serveProcess) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		return err
	case <-time.After(d):
		t.Fatalf("serve still running %v later:\n%s", d, p.stderr)
		return nil
	}
}

// SIGTERM to a real serve process drains the request in flight, flushes
// the store and exits 0; a new process on the same Pebble directory keeps
// the budget. The flush interval is an hour, so only the flush at shutdown
// can have written the spending.
func TestServeProcessSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "upstream "+r.URL.Path)
	}))
	defer up.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sluice.yaml")
	store := fmt.Sprintf("  backend: pebble\n  dir: %s\n  durability: interval\n  flush_interval: 1h", filepath.Join(dir, "state"))
	writeFile(t, cfgPath, gatewayConfig(store, "10.0.0.0/8", 100))
	args := []string{"--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL}

	p := startServeProcess(t, bin, args...)
	base := "http://" + p.listen
	if got := codes(t, 6, "POST", base+"/api/orders", "X-User-ID", "alice"); fmt.Sprint(got) != "[200 200 200 200 200 429]" {
		t.Fatalf("alice's orders: %v", got)
	}

	// A request in flight when SIGTERM arrives is answered.
	slow := make(chan int, 1)
	go func() {
		resp, err := testClient.Get(base + "/slow")
		if err != nil {
			slow <- -1
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the slow request did not reach the upstream")
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-p.exited:
		t.Fatalf("serve exited (%v) with a request in flight", err)
	default:
	}
	close(release)
	if code := <-slow; code != 200 {
		t.Errorf("the request in flight at SIGTERM: %d, want 200", code)
	}
	if err := p.wait(t, 10*time.Second); err != nil {
		t.Fatalf("serve after SIGTERM: %v, want exit 0:\n%s", err, p.stderr)
	}

	// The next process on the same store: alice's budget is still spent.
	p = startServeProcess(t, bin, args...)
	base = "http://" + p.listen
	if code, _ := send(t, "POST", base+"/api/orders", "X-User-ID", "alice"); code != 429 {
		t.Errorf("alice after a restart: %d, want 429 (no fresh budget)", code)
	}
	if code, _ := send(t, "POST", base+"/api/orders", "X-User-ID", "bob"); code != 200 {
		t.Errorf("bob after a restart: %d, want 200", code)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(t, 10*time.Second); err != nil {
		t.Errorf("second serve after SIGTERM: %v, want exit 0:\n%s", err, p.stderr)
	}
}
