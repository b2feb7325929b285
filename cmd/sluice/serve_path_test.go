package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawRequest sends one request over a new TCP connection with the request
// target written as given, byte for byte (Go's client would clean it), and
// returns the status and body. hdr is name, value pairs.
func rawRequest(t *testing.T, addr, method, target string, hdr ...string) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\nConnection: close\r\n", method, target, addr)
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// recordingUpstream is an upstream that keeps the request target of each
// request it is sent, as it arrived on the wire.
type recordingUpstream struct {
	*httptest.Server
	mu      sync.Mutex
	targets []string
}

func newRecordingUpstream(t *testing.T) *recordingUpstream {
	u := &recordingUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.targets = append(u.targets, r.RequestURI)
		u.mu.Unlock()
		io.WriteString(w, r.RequestURI)
	}))
	t.Cleanup(u.Close)
	return u
}

// last returns the request target the upstream was last sent.
func (u *recordingUpstream) last() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.targets) == 0 {
		return ""
	}
	return u.targets[len(u.targets)-1]
}

// pathSpellings are spellings of /api/orders that an upstream cleaning
// paths routes to /api/orders, with the canonical target each stands for.
var pathSpellings = []struct{ target, canonical string }{
	{"//api/orders", "/api/orders"},
	{"/api//orders", "/api/orders"},
	{"/api/./orders", "/api/orders"},
	{"/api/x/../orders", "/api/orders"},
	{"/api/%2e%2e/api/orders", "/api/orders"},
	{"/api%2Forders?page=2", "/api/orders?page=2"},
}

// A real sluice serve process matches every spelling of a path as the
// path itself: with a user spent on POST /api/orders, the spellings are
// 429 too; and the upstream is sent the canonical path, or with
// forward_path: original the path as the client spelt it.
func TestServeProcessPathSpellings(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	up := newRecordingUpstream(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfgPath, gatewayConfig(memoryStore, "10.0.0.0/8", 1000))
	p := startServeProcess(t, bin, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL)

	for i := range 5 {
		if code, _ := rawRequest(t, p.listen, "POST", "/api/orders", "X-User-ID", "m"); code != 200 {
			t.Fatalf("m's order %d: %d, want 200", i+1, code)
		}
	}
	for _, s := range append([]struct{ target, canonical string }{{"/api/orders", "/api/orders"}}, pathSpellings...) {
		if code, body := rawRequest(t, p.listen, "POST", s.target, "X-User-ID", "m"); code != 429 {
			t.Errorf("POST %s for m, spent on /api/orders: %d %q, want 429", s.target, code, body)
		}
	}
	// Another user's spellings pass, and the upstream gets the canonical
	// path, the query as sent. (Five spellings: the user's budget.)
	for _, s := range pathSpellings[:5] {
		code, body := rawRequest(t, p.listen, "POST", s.target, "X-User-ID", "n")
		if code != 200 || body != s.canonical {
			t.Errorf("POST %s for n: %d, upstream sent %q, want 200 and %q", s.target, code, body, s.canonical)
		}
	}
	if code, body := rawRequest(t, p.listen, "POST", pathSpellings[5].target, "X-User-ID", "o"); code != 200 || body != pathSpellings[5].canonical {
		t.Errorf("POST %s for o: %d, upstream sent %q, want 200 and %q", pathSpellings[5].target, code, body, pathSpellings[5].canonical)
	}

	// forward_path: original sends the path as spelt, and matches alike.
	writeFile(t, cfgPath, strings.Replace(gatewayConfig(memoryStore, "10.0.0.0/8", 1000), "match: most_specific", "match: most_specific\nforward_path: original", 1))
	p2 := startServeProcess(t, bin, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL)
	for i, s := range pathSpellings[:5] {
		if code, body := rawRequest(t, p2.listen, "POST", s.target, "X-User-ID", "m"); code != 200 || body != s.target {
			t.Errorf("original: POST %s (order %d): %d, upstream sent %q, want 200 and the target as sent", s.target, i+1, code, body)
		}
	}
	if code, _ := rawRequest(t, p2.listen, "POST", pathSpellings[5].target, "X-User-ID", "m"); code != 429 {
		t.Errorf("original: POST %s after five orders: %d, want 429", pathSpellings[5].target, code)
	}
	// The flag overrides the file.
	p3 := startServeProcess(t, bin, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--forward-path", "canonical")
	if code, body := rawRequest(t, p3.listen, "POST", "//api/./orders", "X-User-ID", "m"); code != 200 || body != "/api/orders" {
		t.Errorf("--forward-path canonical over the file's original: %d, upstream sent %q, want 200 and /api/orders", code, body)
	}
}

// HEAD spends on a GET rule, and path_case: insensitive matches a path in
// any case; both through serve, reloading the file.
func TestServeHeadAndPathCase(t *testing.T) {
	t.Parallel()
	up := newRecordingUpstream(t)
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfgPath, gatewayConfig(memoryStore, "10.0.0.0/8", 1000))
	s := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--admin", "127.0.0.1:0")
	// search: 10 a minute at cost 5, per user: two requests.
	for i, m := range []string{"GET", "HEAD"} {
		if code, _ := rawRequest(t, s.listen, m, "/api/search", "X-User-ID", "h"); code != 200 {
			t.Fatalf("%s /api/search (%d): %d, want 200", m, i+1, code)
		}
	}
	if code, _ := rawRequest(t, s.listen, "HEAD", "/api/search", "X-User-ID", "h"); code != 429 {
		t.Errorf("HEAD /api/search after GET and HEAD spent the GET rule: %d, want 429", code)
	}
	if code, _ := rawRequest(t, s.listen, "POST", "/API/Orders", "X-User-ID", "c"); code != 200 {
		t.Fatalf("POST /API/Orders: %d, want 200", code)
	}
	replaceFile(t, cfgPath, strings.Replace(gatewayConfig(memoryStore, "10.0.0.0/8", 1000), "match: most_specific", "match: most_specific\npath_case: insensitive", 1))
	waitMetric(t, s.admin, "sluice_config_reloads_total{result=\"ok\"}", 1)
	for i := range 5 {
		code, body := rawRequest(t, s.listen, "POST", "/API/Orders", "X-User-ID", "c")
		if code != 200 || body != "/API/Orders" {
			t.Fatalf("insensitive: POST /API/Orders (%d): %d, upstream sent %q, want 200 and the case as sent", i+1, code, body)
		}
	}
	if code, _ := rawRequest(t, s.listen, "POST", "/api/orders", "X-User-ID", "c"); code != 429 {
		t.Errorf("insensitive: POST /api/orders after five /API/Orders: %d, want 429", code)
	}
}

// A --forward-path serve does not know is a usage error naming the flag.
func TestServeForwardPathFlagIsChecked(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfgPath, gatewayConfig(memoryStore, "10.0.0.0/8", 1000))
	var stderr bytes.Buffer
	code := runServe(context.Background(), []string{"--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--forward-path", "clean"},
		io.Discard, &stderr, nil)
	if code != 2 || !strings.Contains(stderr.String(), "--forward-path clean: want canonical or original") {
		t.Errorf("--forward-path clean: exit status %d, stderr %q; want 2 naming the flag", code, stderr.String())
	}
}

// The canonical path replaces the request's path, not the "*" of
// OPTIONS *, and drops the client's own percent-encoding.
func TestCanonicalizeURLPath(t *testing.T) {
	for _, tt := range []struct{ target, path, escaped string }{
		{"//api/./orders?x=1", "/api/orders", "/api/orders"},
		{"/api%2Forders", "/api/orders", "/api/orders"},
		{"/api/%6Frders", "/api/orders", "/api/orders"},
		{"/a%20b/../c%3Fd", "/c?d", "/c%3Fd"},
		{"*", "*", "*"},
	} {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("OPTIONS " + tt.target + " HTTP/1.1\r\nHost: x\r\n\r\n")))
		if err != nil {
			t.Fatalf("%s: %v", tt.target, err)
		}
		canonicalizeURLPath(r)
		if r.URL.Path != tt.path || r.URL.EscapedPath() != tt.escaped {
			t.Errorf("%s: path %q, escaped %q; want %q, %q", tt.target, r.URL.Path, r.URL.EscapedPath(), tt.path, tt.escaped)
		}
	}
}
