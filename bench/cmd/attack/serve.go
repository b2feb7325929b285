package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/internal/loadgen/serveproc"
)

// serveYAML is the configuration of `sluice serve`: one rule over /api per
// user, at a rate no run reaches, so every request goes through the
// limiter and is allowed.
const serveYAML = `store:
  backend: memory
identity:
  user_header: X-User-ID
rules:
  - name: api
    path_prefix: /api
    scope: user
    algorithm: token_bucket
    limit: 1000000000
    window: 1s
`

// upstream is the trivial upstream: it reads the whole body and answers
// "ok", counting its open connections and the requests it is serving.
type upstream struct {
	url       string
	srv       *http.Server
	open      atomic.Int64 // connections open
	serving   atomic.Int64 // requests in the handler (reading a body)
	mu        sync.Mutex   // guards the peaks
	peakOpen  int64
	peakServe int64
}

func startUpstream() (*upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &upstream{url: "http://" + ln.Addr().String()}
	u.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u.serving.Add(1)
			defer u.serving.Add(-1)
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/plain")
			w.Write([]byte("ok\n"))
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				u.open.Add(1)
			case http.StateClosed, http.StateHijacked:
				u.open.Add(-1)
			}
		},
	}
	go u.srv.Serve(ln)
	return u, nil
}

// resetPeaks starts a new flood's peaks from the counts now.
func (u *upstream) resetPeaks() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.peakOpen, u.peakServe = u.open.Load(), u.serving.Load()
}

// sample records the counts in the peaks (run by the sampler).
func (u *upstream) sample() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.peakOpen = max(u.peakOpen, u.open.Load())
	u.peakServe = max(u.peakServe, u.serving.Load())
}

func (u *upstream) peaks() (open, serving int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.peakOpen, u.peakServe
}

// proxy is one reverse proxy under attack.
type proxy struct {
	name, settings string
	addr           string
	g              procGroup
	stop           func() error
	exited         func() bool
}

// startSluiceServe starts `sluice serve` in front of up with serveYAML and
// the extra flags.
func startSluiceServe(bin, dir, upURL string, extra []string) (*proxy, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "serve.yaml")
	if err := os.WriteFile(cfg, []byte(serveYAML), 0o644); err != nil {
		return nil, err
	}
	p, err := serveproc.Start(bin, cfg, upURL, filepath.Join(dir, "serve.log"), 30*time.Second, extra...)
	if err != nil {
		return nil, err
	}
	settings := "its defaults"
	if len(extra) > 0 {
		settings = "`" + strings.Join(extra, " ") + "`"
	}
	return &proxy{name: "sluice serve", settings: settings, addr: p.Listen, g: procGroup{pids: []int{p.Pid()}},
		stop: func() error {
			code, err := p.Stop(20 * time.Second)
			if err == nil && code != 0 {
				err = fmt.Errorf("sluice serve exited %d after SIGTERM; its log:\n%s", code, p.Log())
			}
			return err
		},
		exited: p.Exited}, nil
}

// debianNginx is where Debian's nginx package installs the binary.
const debianNginx = "/usr/sbin/nginx"

func findNginx() string {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat(debianNginx); err == nil {
		return debianNginx
	}
	return ""
}

// nginxConf is nginx as a plain reverse proxy, as a user would configure
// it: Debian's nginx.conf's worker_processes auto and worker_connections
// 768, a proxy_pass with its defaults (the request body buffered before
// the upstream is called, HTTP/1.0 to the upstream, no upstream
// keep-alive) and the directives of -nginx-directives.
const nginxConf = `daemon off;
worker_processes auto;
%[1]s
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 768; }
http {
	access_log %[2]s/access.log;
	client_body_temp_path %[2]s/body;
	proxy_temp_path %[2]s/proxy;
	fastcgi_temp_path %[2]s/fastcgi;
	uwsgi_temp_path %[2]s/uwsgi;
	scgi_temp_path %[2]s/scgi;
	%[5]s
	server {
		listen %[3]s;
		location / {
			proxy_pass %[4]s;
		}
	}
}
`

// startNginx starts nginx from bin in front of upURL with the directives.
func startNginx(bin, dir, upURL, directives string) (*proxy, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := freeAddr()
	if err != nil {
		return nil, err
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // workers keep access to the temporary directory
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, user, dir, ports, upURL, directives), 0o644); err != nil {
		return nil, err
	}
	errLog := filepath.Join(dir, "error.log")
	cmd := exec.Command(bin, "-p", dir, "-c", conf, "-e", errLog)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting nginx: %w", err)
	}
	exited := make(chan error, 1)
	done := make(chan struct{})
	go func() { exited <- cmd.Wait(); close(done) }()
	stop := func() error {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		return nil
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", ports, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(errLog)
			return nil, fmt.Errorf("nginx exited: %v\n%s%s", err, out.String(), log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, errors.New("nginx does not accept connections on " + ports)
		}
	}
	settings := "its defaults"
	if strings.TrimSpace(directives) != "" {
		settings = "`" + strings.TrimSpace(directives) + "`"
	}
	return &proxy{name: "nginx", settings: settings, addr: ports, g: procGroup{pids: []int{cmd.Process.Pid}, withKids: true},
		stop: stop,
		exited: func() bool {
			select {
			case <-done:
				return true
			default:
				return false
			}
		}}, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// connOutcome is what became of one attacking connection.
type connOutcome struct {
	cut   bool          // the proxy closed it
	after time.Duration // when, from the start of its slowness
	how   string        // the status line the proxy sent before closing, or the read error
	err   error         // it could not be set up
}

// floodRow is one flood of item 6 against one proxy.
type floodRow struct {
	proxy, settings, flood string
	conns                  int
	outcomes               []connOutcome
	upOpen, upServing      int64
	rssBefore, peak, after int64
	before, dur            callerStats
	took                   time.Duration
	err                    string
}

// slowBodyConn sends a POST's headers announcing a body of 1 MB, then one
// byte of it a second, until the proxy closes the connection or stop.
func slowBodyConn(addr string, i int, stop <-chan struct{}, out *connOutcome, wg *sync.WaitGroup) {
	defer wg.Done()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		out.err = err
		return
	}
	defer c.Close()
	t0 := time.Now()
	if _, err := fmt.Fprintf(c, "POST /api/upload HTTP/1.1\r\nHost: attack\r\nX-User-ID: slow-%d\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\n", i); err != nil {
		out.err = err
		return
	}
	closed := make(chan string, 1)
	go func() { closed <- readUntilClosed(c) }()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case how := <-closed:
			out.cut, out.after, out.how = true, time.Since(t0), how
			return
		case <-stop:
			return
		case <-t.C:
			if _, err := c.Write([]byte{'x'}); err != nil {
				out.cut, out.after, out.how = true, time.Since(t0), "write: "+errShort(err)
				return
			}
		}
	}
}

// idleConn makes one ordinary request, reads the answer, and then keeps
// the connection idle until the proxy closes it or stop.
func idleConn(addr string, i int, stop <-chan struct{}, out *connOutcome, wg *sync.WaitGroup) {
	defer wg.Done()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		out.err = err
		return
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "GET /api/item HTTP/1.1\r\nHost: attack\r\nX-User-ID: idle-%d\r\n\r\n", i); err != nil {
		out.err = err
		return
	}
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		out.err = err
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		out.err = fmt.Errorf("first request answered %s", resp.Status)
		return
	}
	c.SetReadDeadline(time.Time{})
	t0 := time.Now()
	closed := make(chan string, 1)
	go func() { closed <- readUntilClosed(br) }()
	select {
	case how := <-closed:
		out.cut, out.after, out.how = true, time.Since(t0), how
	case <-stop:
	}
}

// readUntilClosed reads c until it fails, and returns the first line the
// proxy sent, or how the read ended.
func readUntilClosed(c io.Reader) string {
	br := bufio.NewReader(c)
	first, err := br.ReadString('\n')
	if err != nil {
		return "closed (" + errShort(err) + ")"
	}
	io.Copy(io.Discard, br)
	return strings.TrimSpace(first)
}

func errShort(err error) string {
	switch {
	case errors.Is(err, io.EOF):
		return "EOF"
	case errors.Is(err, net.ErrClosed):
		return "closed"
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}

// flood runs one flood of n connections made by conn against p, with the
// normal caller beside it, until every connection is cut or o.hold.
func flood(p *proxy, up *upstream, name string, n int, o *options,
	conn func(addr string, i int, stop <-chan struct{}, out *connOutcome, wg *sync.WaitGroup)) floodRow {
	row := floodRow{proxy: p.name, settings: p.settings, flood: name, conns: n}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer client.CloseIdleConnections()
	get := func(ctx context.Context, seq int) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/api/item", nil)
		req.Header.Set("X-User-ID", fmt.Sprintf("normal-%d", seq%100))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("answered %s", resp.Status)
		}
		return nil
	}
	startCaller(10*time.Millisecond, 2*time.Second, get).finish() // warm
	c := startCaller(10*time.Millisecond, 5*time.Second, get)
	time.Sleep(o.baseline)
	row.before = c.finish()

	up.resetPeaks()
	smp := startSampler(p.g, 250*time.Millisecond, up.sample)
	row.rssBefore = smp.now().rss
	c = startCaller(10*time.Millisecond, 5*time.Second, get)
	row.outcomes = make([]connOutcome, n)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t0 := time.Now()
	// Open the connections 50 at a time, as a client would ramp up.
	for i := range n {
		wg.Add(1)
		go conn(p.addr, i, stop, &row.outcomes[i], &wg)
		if i%50 == 49 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-time.After(o.hold):
		close(stop)
		<-allDone
	}
	row.took = time.Since(t0)
	row.dur = c.finish()
	row.after = smp.now().rss
	row.peak, _ = smp.finish()
	row.upOpen, row.upServing = up.peaks()
	if p.exited() {
		row.err = p.name + " exited during the flood"
	}
	return row
}

// summary says what became of a flood's connections.
func (r floodRow) summary() (cut, held, failed string) {
	var afters []time.Duration
	hows := map[string]int{}
	nHeld, nFailed := 0, 0
	var firstErr error
	for _, o := range r.outcomes {
		switch {
		case o.err != nil:
			nFailed++
			if firstErr == nil {
				firstErr = o.err
			}
		case o.cut:
			afters = append(afters, o.after)
			hows[o.how]++
		default:
			nHeld++
		}
	}
	cut = "none"
	if len(afters) > 0 {
		slices.Sort(afters)
		var hs []string
		for h, k := range hows {
			hs = append(hs, fmt.Sprintf("%d× %s", k, clip(h, 40)))
		}
		slices.Sort(hs)
		cut = fmt.Sprintf("%d, after %.1f / %.1f / %.1f s (min / median / max); %s", len(afters),
			afters[0].Seconds(), afters[len(afters)/2].Seconds(), afters[len(afters)-1].Seconds(), strings.Join(hs, ", "))
	}
	held = fmt.Sprintf("%d", nHeld)
	if nHeld > 0 {
		held = fmt.Sprintf("%d, still open after %.0f s", nHeld, r.took.Seconds())
	}
	failed = fmt.Sprintf("%d", nFailed)
	if firstErr != nil {
		failed += ": " + clip(firstErr.Error(), 60)
	}
	return cut, held, failed
}
