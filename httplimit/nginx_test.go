package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/identity"
)

// The addresses of the nginx test, all on loopback: nginx listens on
// nginxAddr and reaches the upstream from proxyAddr, the one trusted
// proxy; the clients connect from addresses of their own.
const (
	nginxAddr = "127.0.0.1"
	proxyAddr = "127.0.0.2"
	clientA   = "127.0.0.3"
	clientB   = "127.0.0.4"
)

// findNginx returns the nginx binary, or skips the test loudly.
func findNginx(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	t.Skip("SKIPPED: nginx is not installed (not on PATH nor /usr/sbin/nginx); the test behind a real proxy needs it: apt-get install -y nginx")
	return ""
}

// startNginx runs nginx in the foreground with a configuration of its own
// in a temporary directory, proxying to upstream from proxyAddr and
// appending to X-Forwarded-For as Debian's proxy_params do, with the extra
// directives of the location. It returns the address nginx listens on and
// stops nginx when the test ends.
func startNginx(t *testing.T, bin, upstream string, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", nginxAddr+":0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // workers keep access to the temporary directory
	}
	conf := fmt.Sprintf(`daemon off;
%[1]s
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 64; }
http {
	access_log off;
	client_body_temp_path %[2]s/body;
	proxy_temp_path %[2]s/proxy;
	fastcgi_temp_path %[2]s/fastcgi;
	uwsgi_temp_path %[2]s/uwsgi;
	scgi_temp_path %[2]s/scgi;
	server {
		listen %[3]s;
		location / {
			proxy_pass http://%[4]s;
			proxy_bind %[5]s;
			proxy_set_header Host $host;
			proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
			%[6]s
		}
	}
}
`, user, dir, listen, upstream, proxyAddr, strings.Join(extra, "\n\t\t\t"))
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", confPath, "-e", filepath.Join(dir, "error.log"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting nginx: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt) // SIGINT: fast shutdown
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	// Wait until it accepts connections (or has failed to start).
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			c.Close()
			return listen
		}
		select {
		case err := <-exited:
			exited <- err // for the cleanup's reap, which would otherwise wait forever
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited: %v\n%s%s", err, out.String(), log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not accept connections on %s", listen)
		}
	}
}

// clientFrom returns an HTTP client whose connections come from the local
// address from.
func clientFrom(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		DisableKeepAlives: true,
	}, Timeout: 10 * time.Second}
}

// Behind a real nginx that maintains X-Forwarded-For, with only nginx
// trusted, no header a client adds moves its request onto another key: a
// Forwarded header naming nginx itself, or an X-Forwarded-For naming it, is
// counted under the client's own address, which therefore gets no second
// budget, and nothing lands on the proxy's key, which every such client
// would otherwise share.
func TestBehindNginxClientCannotChooseItsKey(t *testing.T) {
	bin := findNginx(t)
	eng, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: engine.NewFakeClock(time.Unix(1_700_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	rs, err := sluice.NewRuleset([]sluice.Rule{{Name: "per-ip", PathPrefix: "/", Scope: sluice.ScopeIP, Algorithm: "fixed_window", Limit: 1, Window: time.Hour}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := identity.New(identity.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix(proxyAddr + "/32")}})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(httplimit.Config{Engine: eng, Registry: sluice.NewRegistry(rs), Identifier: id,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 16)
	upstream := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.RemoteAddr + " XFF=" + r.Header.Get("X-Forwarded-For")
		io.WriteString(w, "ok")
	})))
	defer upstream.Close()
	front := "http://" + startNginx(t, bin, upstream.Listener.Addr().String())

	get := func(from string, headers ...string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", front+"/api/x", nil)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Add(headers[i], headers[i+1])
		}
		resp, err := clientFrom(from).Do(req)
		if err != nil {
			t.Fatalf("request from %s: %v", from, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	peek := func(key string) int64 {
		t.Helper()
		d, err := eng.Peek(context.Background(), rs.Rule("per-ip").Limit(), key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			return 0
		}
		return d.Remaining + 1 // Peek answers as if the 1 were spent
	}

	steps := []struct {
		from    string
		headers []string
		want    int
	}{
		{clientA, []string{"Forwarded", "for=" + proxyAddr}, 200}, // counted as A, not as the proxy
		{clientB, nil, 200}, // B has a budget of its own
		{clientA, []string{"Forwarded", "for=198.51.100.7"}, 429},    // no second budget for A
		{clientA, []string{"X-Forwarded-For", proxyAddr}, 429},       // nor by naming the proxy in XFF
		{clientA, []string{"X-Forwarded-For", "198.51.100.8"}, 429},  // nor by inventing a client
		{clientB, []string{"Forwarded", `for="[2001:db8::1]"`}, 429}, // B is B whatever it says
	}
	for i, s := range steps {
		if got := get(s.from, s.headers...); got != s.want {
			t.Errorf("step %d: from %s with %q: %d, want %d", i, s.from, s.headers, got, s.want)
		}
	}
	// The upstream saw nginx's connections, from the trusted address.
	select {
	case s := <-seen:
		if !strings.HasPrefix(s, proxyAddr+":") {
			t.Errorf("upstream saw %s, want connections from %s", s, proxyAddr)
		}
	default:
		t.Error("no request reached the upstream")
	}
	for key, want := range map[string]int64{"ip:" + clientA: 0, "ip:" + clientB: 0, "ip:" + proxyAddr: 1, "ip:198.51.100.7": 1, "ip:198.51.100.8": 1} {
		if got := peek(key); got != want {
			t.Errorf("%s has %d left, want %d", key, got, want)
		}
	}
}

// Behind a real nginx appending the client's address to whatever Forwarded
// header the client sent ("$http_forwarded, for=$remote_addr", the naive
// form of RFC 7239 forwarding), a client that leaves a quoted-string open
// (for="x) swallows the element nginx appended: the header then does not
// say who the client is, and the request is refused with 400 rather than
// counted on nginx's own address, which every client behind it would
// share. Well-formed headers keep working, and the proxy's key is never
// spent.
func TestBehindNginxMalformedForwardedIsRefused(t *testing.T) {
	bin := findNginx(t)
	eng, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: engine.NewFakeClock(time.Unix(1_700_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	rs, err := sluice.NewRuleset([]sluice.Rule{{Name: "per-ip", PathPrefix: "/", Scope: sluice.ScopeIP, Algorithm: "fixed_window", Limit: 1, Window: time.Hour}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := identity.New(identity.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix(proxyAddr + "/32")}, ForwardingHeader: identity.Forwarded})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(httplimit.Config{Engine: eng, Registry: sluice.NewRegistry(rs), Identifier: id,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 16)
	upstream := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Forwarded")
		io.WriteString(w, "ok")
	})))
	defer upstream.Close()
	front := "http://" + startNginx(t, bin, upstream.Listener.Addr().String(),
		`proxy_set_header Forwarded "$http_forwarded, for=$remote_addr";`)

	get := func(from string, headers ...string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", front+"/api/x", nil)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Add(headers[i], headers[i+1])
		}
		resp, err := clientFrom(from).Do(req)
		if err != nil {
			t.Fatalf("request from %s: %v", from, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	steps := []struct {
		from    string
		headers []string
		want    int
	}{
		{clientA, []string{"Forwarded", `for="x`}, 400},                // swallows nginx's element: refused
		{clientB, []string{"Forwarded", `for="x`}, 400},                // and again, from another client
		{clientA, []string{"Forwarded", `proto=http;for="[::1]`}, 400}, // an open quote anywhere does the same
		{clientA, nil, 200}, // A's own budget, untouched by the above
		{clientB, []string{"Forwarded", "for=" + proxyAddr}, 200}, // B, not the proxy
		{clientB, []string{"Forwarded", "for=unknown"}, 429},      // B's again: nginx's element is the right-most
	}
	for i, s := range steps {
		if got := get(s.from, s.headers...); got != s.want {
			t.Errorf("step %d: from %s with %q: %d, want %d", i, s.from, s.headers, got, s.want)
		}
	}
	select {
	case f := <-seen:
		if !strings.HasSuffix(f, "for="+clientA) {
			t.Errorf("upstream saw Forwarded %q, want nginx's element for=%s last", f, clientA)
		}
	default:
		t.Error("no request reached the upstream")
	}
	d, err := eng.Peek(context.Background(), rs.Rule("per-ip").Limit(), "ip:"+proxyAddr, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || d.Remaining != 0 {
		t.Errorf("the proxy's own key: %+v, want untouched (nothing counted on it)", d)
	}
}
