// Command loadtest measures what the `sluice serve` gateway costs a
// request, end to end over real sockets, beside nginx: it builds sluice,
// starts a trivial upstream in process and, all on loopback, drives the
// same closed-loop load at six variants, interleaved in rounds so that the
// machine's noise falls on all of them: the upstream direct; nginx
// proxying it; nginx with limit_req deciding every request (never
// denying); `sluice serve` subprocesses on memory and on Pebble (interval)
// with a rule that decides every request and never denies; and serve with
// no rule matching (the proxy hop alone). nginx is found on PATH or at
// /usr/sbin/nginx; without it its variants are skipped, saying so. Then it
// checks the limiter under load: K callers against a rule of L per day
// each get exactly L 200s, and 429s with Retry-After for the rest. Last it
// stops the serve processes with SIGTERM and checks they exit 0.
//
// It writes a markdown fragment (-out) with the medians of the rounds per
// variant, serve's ratios to nginx with limit_req, and a machine-readable
// line
//
//	<!-- load: p50_direct_us=… p50_proxy_us=… p99_direct_us=… p99_proxy_us=… rps_direct=… rps_proxy=… p50_bare_us=… p99_bare_us=… rps_bare=… p50_memory_us=… … rps_nginx_limit=… limited_ok=true -->
//
// ("proxy" is serve on Pebble, "bare" serve with no rule).
//
// Usage, from bench/:
//
//	go run ./cmd/loadtest -out out/load.md [-requests 20000] [-concurrency 16] [-rounds 5] [-sluice PATH]
//
// It exits 1, after writing the fragment, when the limiter miscounted, a
// request failed or a proxy did not exit 0; 2 for a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-go/sluice/internal/loadgen"
	"github.com/sluice-go/sluice/internal/loadgen/serveproc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line.
type options struct {
	out            string
	requests       int
	concurrency    int
	rounds         int
	sluice         string
	callers        int
	limitedCallers int
	limit          int
	serialRequests int
}

// The variants every measurement drives, in this order within a round
// (the first of a round rotates). Each is a base URL the same requests go
// to.
const (
	vDirect     = iota // the upstream direct
	vNginx             // nginx proxying it
	vNginxLimit        // nginx with limit_req on every request
	vMemory            // sluice serve on memory, deciding every request
	vPebble            // sluice serve on Pebble (interval), deciding every request
	vBare              // sluice serve with no rule matching: the proxy hop alone
	nVariants
)

// variantNames name the variants in the tables.
var variantNames = [nVariants]string{
	vDirect:     "upstream direct",
	vNginx:      "nginx, proxy_pass",
	vNginxLimit: "nginx, limit_req",
	vMemory:     "`sluice serve`, memory, deciding every request",
	vPebble:     "`sluice serve`, Pebble interval, deciding every request",
	vBare:       "`sluice serve`, no rule matching",
}

// side is what one variant measured at one concurrency.
type side struct {
	all    loadgen.Result // every round merged
	rounds []round
}

// round is one round's figures of one side.
type round struct {
	rps      float64
	p50, p99 time.Duration
}

// median returns the median over the rounds of f.
func (s *side) median(f func(round) float64) float64 {
	if len(s.rounds) == 0 {
		return 0
	}
	v := make([]float64, len(s.rounds))
	for i, r := range s.rounds {
		v[i] = f(r)
	}
	slices.Sort(v)
	if n := len(v); n%2 == 1 {
		return v[n/2]
	} else {
		return (v[n/2-1] + v[n/2]) / 2
	}
}

func (s *side) rps() float64 { return s.median(func(r round) float64 { return r.rps }) }
func (s *side) p50() float64 { return s.median(func(r round) float64 { return us(r.p50) }) }
func (s *side) p99() float64 { return s.median(func(r round) float64 { return us(r.p99) }) }

// pair is the allowed traffic measured at one concurrency on every
// variant; a variant that could not run (nginx absent) has no rounds.
type pair struct {
	concurrency, requests int
	sides                 [nVariants]side
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.out, "out", "out/load.md", "the markdown `file` to write")
	fs.IntVar(&o.requests, "requests", 20000, "requests per variant for the allowed traffic, over all rounds")
	fs.IntVar(&o.concurrency, "concurrency", 16, "requests in flight at once, on as many keep-alive connections")
	fs.IntVar(&o.rounds, "rounds", 5, "interleaved rounds the requests are split into")
	fs.StringVar(&o.sluice, "sluice", "", "the sluice `binary`; built from ../cmd/sluice when empty")
	fs.IntVar(&o.callers, "callers", 64, "distinct users in the allowed traffic")
	fs.IntVar(&o.limitedCallers, "limited-callers", 8, "users (K) in the limited traffic")
	fs.IntVar(&o.serialRequests, "serial-requests", 5000, "requests per side sent one at a time too, for the cost of one request without queueing; 0 skips it")
	fs.IntVar(&o.limit, "limit", 50, "the limited rule's budget (L) per user per day; each user sends 3×L requests")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.out == "":
		return nil, errors.New("-out is required")
	case o.rounds < 1:
		return nil, fmt.Errorf("-rounds %d: want at least 1", o.rounds)
	case o.requests < o.rounds:
		return nil, fmt.Errorf("-requests %d: want at least one per round (%d)", o.requests, o.rounds)
	case o.concurrency < 1:
		return nil, fmt.Errorf("-concurrency %d: want at least 1", o.concurrency)
	case o.callers < 1 || o.limitedCallers < 1:
		return nil, errors.New("-callers and -limited-callers: want at least 1")
	case o.serialRequests < 0 || (o.serialRequests > 0 && o.serialRequests < o.rounds):
		return nil, fmt.Errorf("-serial-requests %d: want 0, or at least one per round (%d)", o.serialRequests, o.rounds)
	case o.limit < 1 || o.limit > 100000:
		return nil, fmt.Errorf("-limit %d: want 1 to 100000", o.limit)
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return 2
	}
	m, err := measure(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return 1
	}
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return 1
	}
	if err := os.WriteFile(o.out, []byte(m.markdown()), 0o644); err != nil {
		fmt.Fprintf(stderr, "loadtest: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "loadtest: wrote %s\n%s\n", o.out, m.line())
	if len(m.failures) > 0 {
		for _, f := range m.failures {
			fmt.Fprintf(stderr, "loadtest: FAIL: %s\n", f)
		}
		return 1
	}
	return 0
}

// measurement is what a run found.
type measurement struct {
	o               *options
	loaded          pair  // at -concurrency
	serial          *pair // one request at a time, or nil (-serial-requests 0)
	limited         *loadgen.Result
	limitedOK       bool
	limitedDetail   string
	exitCode        int
	nginx           string // the nginx binary, or "" when absent
	nginxVersion    string
	failures        []string
	goVersion, when string
}

// The rules the proxy runs: "open" for traffic that is never limited (a
// budget of a billion per second), "limited" for L per user per day. A
// day-long token bucket refills one token per 86400/L seconds, so during a
// run of seconds each user gets exactly L. The store section is the first
// argument (a YAML block).
const configTemplate = `store:
%s
identity:
  user_header: X-User-ID
on_store_error: open
rules:
  - name: open
    path_prefix: /open
    scope: user
    algorithm: token_bucket
    limit: 1000000000
    window: 1s
  - name: limited
    path_prefix: /limited
    scope: user
    algorithm: token_bucket
    limit: %d
    window: 24h
`

// pebbleStore is the Pebble store section of the configuration, in dir.
const pebbleStore = `  backend: pebble
  dir: %q
  durability: interval
  flush_interval: 50ms`

func measure(ctx context.Context, o *options, logw io.Writer) (*measurement, error) {
	m := &measurement{o: o, goVersion: runtime.Version(), when: time.Now().UTC().Format("2006-01-02 15:04 UTC")}
	tmp, err := os.MkdirTemp("", "sluice-loadtest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	if o.sluice == "" {
		fmt.Fprintf(logw, "loadtest: building cmd/sluice\n")
	}
	bin, err := serveproc.Binary(ctx, o.sluice, "..", tmp)
	if err != nil {
		return nil, err
	}

	body := []byte("ok\n")
	upURL, closeUp, err := serveproc.Upstream(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	}))
	if err != nil {
		return nil, err
	}
	defer closeUp()

	var urls [nVariants]string
	urls[vDirect] = upURL
	// startServe starts sluice serve on a configuration, stopped (and its
	// exit status checked) at the end.
	var procs []*serveproc.Process
	defer func() {
		for _, p := range procs {
			if !p.Exited() {
				p.Stop(10 * time.Second)
			}
		}
	}()
	startServe := func(name, config string) (*serveproc.Process, error) {
		cfg := filepath.Join(tmp, name+".yaml")
		if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
			return nil, err
		}
		p, err := serveproc.Start(bin, cfg, upURL, filepath.Join(tmp, name+".log"), 30*time.Second)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		return p, nil
	}
	pp, err := startServe("pebble", fmt.Sprintf(configTemplate, fmt.Sprintf(pebbleStore, filepath.Join(tmp, "state")), o.limit))
	if err != nil {
		return nil, err
	}
	urls[vPebble] = "http://" + pp.Listen
	mp, err := startServe("memory", fmt.Sprintf(configTemplate, "  backend: memory", o.limit))
	if err != nil {
		return nil, err
	}
	urls[vMemory] = "http://" + mp.Listen
	// The same binary with no rule: every request passes the middleware
	// untouched, so this side is the reverse proxy's hop alone.
	bp, err := startServe("bare", "store:\n  backend: memory\nrules: []\n")
	if err != nil {
		return nil, err
	}
	urls[vBare] = "http://" + bp.Listen

	if m.nginx = findNginx(); m.nginx == "" {
		fmt.Fprintf(logw, "loadtest: SKIPPED nginx: not on PATH nor %s (apt-get install -y nginx); its rows are left out\n", debianNginx)
	} else {
		n, err := startNginx(m.nginx, filepath.Join(tmp, "nginx"), upURL)
		if err != nil {
			return nil, err
		}
		defer n.stop()
		m.nginxVersion = n.version
		urls[vNginx], urls[vNginxLimit] = "http://"+n.plain, "http://"+n.limited
	}

	headers := make([]http.Header, o.callers)
	for i := range headers {
		headers[i] = http.Header{"X-User-Id": {fmt.Sprintf("open-%d", i)}}
	}
	allowed := func(_, seq int) loadgen.Request {
		return loadgen.Request{Path: "/open/item", Header: headers[seq%len(headers)]}
	}
	// One client per side, kept across rounds, so that all reuse their
	// connections alike.
	var clients [nVariants]*http.Client
	for i := range clients {
		clients[i] = loadgen.NewClient(o.concurrency, 10*time.Second)
	}
	drive := func(v, workers, n int) (*loadgen.Result, error) {
		return loadgen.Run(ctx, loadgen.Config{BaseURL: urls[v], Workers: workers, Requests: n,
			Factory: allowed, Client: clients[v]})
	}
	// Warm up every side: connections, the proxies' pools, the engines' keys.
	for v := range nVariants {
		if urls[v] == "" {
			continue
		}
		if _, err := drive(v, o.concurrency, max(1000, 4*o.concurrency)); err != nil {
			return nil, fmt.Errorf("warm-up of %s: %w", variantNames[v], err)
		}
	}
	// measurePair drives n requests per side at the given concurrency, in
	// o.rounds rounds whose first side rotates.
	measurePair := func(workers, n int) (*pair, error) {
		per := n / o.rounds
		pr := &pair{concurrency: workers, requests: per * o.rounds}
		for r := range o.rounds {
			line := fmt.Sprintf("loadtest: concurrency %d, round %d/%d, req/s:", workers, r+1, o.rounds)
			for j := range nVariants {
				v := (r + j) % nVariants
				if urls[v] == "" {
					continue
				}
				res, err := drive(v, workers, per)
				if err != nil {
					return nil, fmt.Errorf("round %d, %s: %w", r+1, variantNames[v], err)
				}
				s := &pr.sides[v]
				s.all.Merge(res)
				s.rounds = append(s.rounds, round{rps: res.RPS(), p50: res.Percentile(50), p99: res.Percentile(99)})
			}
			for v := range nVariants {
				if rs := pr.sides[v].rounds; len(rs) > 0 {
					line += fmt.Sprintf(" %s %.0f", shortNames[v], rs[len(rs)-1].rps)
				}
			}
			fmt.Fprintln(logw, line)
		}
		for v := range nVariants {
			res := &pr.sides[v].all
			if urls[v] == "" {
				continue
			}
			if res.Errors > 0 || res.Status(http.StatusOK) != res.Requests {
				m.failures = append(m.failures, fmt.Sprintf("allowed traffic at concurrency %d, %s: %d of %d answered 200 (%v), %d transport errors %q",
					workers, variantNames[v], res.Status(http.StatusOK), res.Requests, res.ByStatus, res.Errors, res.ErrorSample))
			}
		}
		return pr, nil
	}
	loaded, err := measurePair(o.concurrency, o.requests)
	if err != nil {
		return nil, err
	}
	m.loaded = *loaded
	if o.serialRequests > 0 && o.concurrency > 1 {
		if m.serial, err = measurePair(1, o.serialRequests); err != nil {
			return nil, err
		}
	}

	// The limited traffic, on Pebble: K users, 3×L requests each, all at
	// once.
	k, l := o.limitedCallers, o.limit
	lh := make([]http.Header, k)
	names := make([]string, k)
	for i := range lh {
		names[i] = fmt.Sprintf("limited-%d", i)
		lh[i] = http.Header{"X-User-Id": {names[i]}}
	}
	m.limited, err = loadgen.Run(ctx, loadgen.Config{BaseURL: urls[vPebble], Workers: o.concurrency, Requests: 3 * k * l,
		Client: clients[vPebble],
		Factory: func(_, seq int) loadgen.Request {
			return loadgen.Request{Path: "/limited/item", Header: lh[seq%k], Caller: names[seq%k]}
		}})
	if err != nil {
		return nil, fmt.Errorf("limited traffic: %w", err)
	}
	m.limitedOK, m.limitedDetail = checkLimited(m.limited, names, l, 2*l)
	if !m.limitedOK {
		m.failures = append(m.failures, "limited traffic: "+m.limitedDetail)
	}

	for _, p := range []*serveproc.Process{bp, mp} {
		if code, err := p.Stop(20 * time.Second); err != nil {
			m.failures = append(m.failures, "sluice serve: "+err.Error())
		} else if code != 0 {
			m.failures = append(m.failures, fmt.Sprintf("sluice serve exited with %d after SIGTERM, want 0; its log:\n%s", code, p.Log()))
		}
	}
	code, err := pp.Stop(20 * time.Second)
	m.exitCode = code
	if err != nil {
		m.failures = append(m.failures, err.Error())
	} else if code != 0 {
		m.failures = append(m.failures, fmt.Sprintf("sluice serve on Pebble exited with %d after SIGTERM, want 0; its log:\n%s", code, pp.Log()))
	}
	return m, nil
}

// shortNames name the variants in the progress lines.
var shortNames = [nVariants]string{
	vDirect: "direct", vNginx: "nginx", vNginxLimit: "nginx-limit_req",
	vMemory: "serve-memory", vPebble: "serve-pebble", vBare: "serve-norule",
}

// checkLimited reports whether every caller in names got exactly allowed
// 200s and denied 429s, each with Retry-After, and nothing else; detail
// says so in words, or names the first callers that did not.
func checkLimited(res *loadgen.Result, names []string, allowed, denied int) (ok bool, detail string) {
	var bad []string
	if res.Errors > 0 {
		bad = append(bad, fmt.Sprintf("%d transport errors %q", res.Errors, res.ErrorSample))
	}
	for _, n := range names {
		cs := res.ByCaller[n]
		if cs == nil {
			bad = append(bad, n+": no answers")
			continue
		}
		got200, got429 := cs.ByStatus[http.StatusOK], cs.ByStatus[http.StatusTooManyRequests]
		others := 0
		for code, c := range cs.ByStatus {
			if code != http.StatusOK && code != http.StatusTooManyRequests {
				others += c
			}
		}
		if got200 != allowed || got429 != denied || others > 0 || cs.NoRetryAfter > 0 || cs.Errors > 0 {
			bad = append(bad, fmt.Sprintf("%s: %d×200 (want %d), %d×429 (want %d, %d without Retry-After), %d other, %d errors",
				n, got200, allowed, got429, denied, cs.NoRetryAfter, others, cs.Errors))
		}
	}
	if len(bad) > 0 {
		if len(bad) > 5 {
			bad = append(bad[:5], fmt.Sprintf("and %d more", len(bad)-5))
		}
		return false, strings.Join(bad, "; ")
	}
	return true, fmt.Sprintf("each of the %d users got exactly %d×200 and %d×429, every 429 with Retry-After", len(names), allowed, denied)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// line is the machine-readable summary: medians of the rounds at
// -concurrency. "proxy" is serve on Pebble deciding every request, "bare"
// serve with no rule; the nginx keys are absent when nginx was.
func (m *measurement) line() string {
	s := &m.loaded.sides
	l := fmt.Sprintf("<!-- load: p50_direct_us=%.1f p50_proxy_us=%.1f p99_direct_us=%.1f p99_proxy_us=%.1f rps_direct=%.1f rps_proxy=%.1f p50_bare_us=%.1f p99_bare_us=%.1f rps_bare=%.1f",
		s[vDirect].p50(), s[vPebble].p50(), s[vDirect].p99(), s[vPebble].p99(), s[vDirect].rps(), s[vPebble].rps(),
		s[vBare].p50(), s[vBare].p99(), s[vBare].rps())
	l += fmt.Sprintf(" p50_memory_us=%.1f p99_memory_us=%.1f rps_memory=%.1f", s[vMemory].p50(), s[vMemory].p99(), s[vMemory].rps())
	if len(s[vNginxLimit].rounds) > 0 {
		l += fmt.Sprintf(" p50_nginx_us=%.1f p99_nginx_us=%.1f rps_nginx=%.1f p50_nginx_limit_us=%.1f p99_nginx_limit_us=%.1f rps_nginx_limit=%.1f",
			s[vNginx].p50(), s[vNginx].p99(), s[vNginx].rps(), s[vNginxLimit].p50(), s[vNginxLimit].p99(), s[vNginxLimit].rps())
	}
	return l + fmt.Sprintf(" limited_ok=%t -->", m.limitedOK)
}

func (m *measurement) markdown() string {
	o := m.o
	var b strings.Builder
	fmt.Fprintf(&b, "## Gateway under load: `sluice serve` beside nginx, against the upstream direct\n\n")
	nginx := "nginx was not found (not on PATH nor " + debianNginx + "), so its rows are absent"
	if m.nginx != "" {
		nginx = fmt.Sprintf("nginx (%s, %s) runs 2 workers with keep-alive connections to the upstream "+
			"(an upstream block with keepalive 64, proxy_http_version 1.1, Connection cleared), appends X-Forwarded-For as serve does and "+
			"writes its access log; its limit_req server keys a zone by $binary_remote_addr at a rate no run reaches, so it decides "+
			"every request and denies none", m.nginxVersion, m.nginx)
	}
	fmt.Fprintf(&b, "Measured %s by `go run ./cmd/loadtest` (bench/). Each table sends the same requests to every variant "+
		"in %d interleaved rounds (the variant that goes first rotates), closed loop, "+
		"on one keep-alive connection per request in flight, from %d distinct users; everything on loopback (127.0.0.1) on one machine (%s/%s, %d CPUs, shared with the load generator "+
		"and the upstream), %s. Each `sluice serve` is a subprocess (GOMAXPROCS is the CPU count) "+
		"with a token bucket per user whose budget is never reached, on memory or on Pebble (interval durability, 50 ms flush), "+
		"or with no rule for the path; %s. The upstream is an in-process net/http handler "+
		"answering a 3-byte body. Latency is from sending the request to reading the body's last byte. "+
		"Every figure is the median of the rounds' own figures.\n\n",
		m.when, o.rounds, o.callers, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), m.goVersion, nginx)
	m.loaded.table(&b)
	if m.serial != nil {
		m.serial.table(&b)
		fmt.Fprintf(&b, "In a closed loop a side that saturates the CPUs answers in about concurrency ÷ throughput, so at "+
			"concurrency %d the percentiles are mostly queueing and compare capacity; one request at a time shows the cost "+
			"of the extra hop without it. "+
			"The load line below holds the concurrency-%d figures.\n\n", o.concurrency, o.concurrency)
	}
	status := "**ok**"
	if !m.limitedOK {
		status = "**FAILED**"
	}
	fmt.Fprintf(&b, "Limiter under load (%s), on Pebble: %d users × %d requests at once against a token bucket of %d per user per day: %s.\n\n",
		status, o.limitedCallers, 3*o.limit, o.limit, m.limitedDetail)
	fmt.Fprintf(&b, "SIGTERM at the end: exit status %d.\n\n", m.exitCode)
	b.WriteString(m.line())
	b.WriteString("\n")
	return b.String()
}

// table writes the pair's table: per variant the medians of its rounds,
// then serve's ratios to nginx with limit_req.
func (p *pair) table(b *strings.Builder) {
	fmt.Fprintf(b, "Concurrency %d, %d requests per variant (medians of %d rounds):\n\n", p.concurrency, p.requests, len(p.sides[vDirect].rounds))
	fmt.Fprintf(b, "| | req/s | p50 | p99 |\n|---|---:|---:|---:|\n")
	for v := range nVariants {
		s := &p.sides[v]
		if len(s.rounds) == 0 {
			continue
		}
		fmt.Fprintf(b, "| %s | %.0f | %.0f µs | %.0f µs |\n", variantNames[v], s.rps(), s.p50(), s.p99())
	}
	if ng := &p.sides[vNginxLimit]; len(ng.rounds) > 0 && ng.rps() > 0 && ng.p99() > 0 {
		for _, v := range []int{vMemory, vPebble, vBare} {
			s := &p.sides[v]
			fmt.Fprintf(b, "| %s ÷ nginx limit_req | ×%.2f | ×%.2f | ×%.2f |\n", shortNames[v], s.rps()/ng.rps(), s.p50()/ng.p50(), s.p99()/ng.p99())
		}
	}
	b.WriteString("\n")
	var rounds []string
	for i := range p.sides[vDirect].rounds {
		var f []string
		for v := range nVariants {
			if rs := p.sides[v].rounds; i < len(rs) {
				f = append(f, fmt.Sprintf("%.0f", rs[i].rps))
			}
		}
		rounds = append(rounds, strings.Join(f, "/"))
	}
	var order []string
	for v := range nVariants {
		if len(p.sides[v].rounds) > 0 {
			order = append(order, shortNames[v])
		}
	}
	fmt.Fprintf(b, "req/s per round, %s: %s.\n\n", strings.Join(order, "/"), strings.Join(rounds, ", "))
}
