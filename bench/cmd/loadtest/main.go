// Command loadtest measures what the `sluice serve` gateway costs a
// request, end to end over real sockets: it builds sluice, starts a trivial
// upstream in process and `sluice serve` as a subprocess on a Pebble store,
// both on loopback, and drives the same closed-loop load at the upstream
// directly and through the proxy, interleaved in rounds so that the
// machine's noise falls on both. Then it checks the limiter under load: K
// callers against a rule of L per day each get exactly L 200s, and 429s
// with Retry-After for the rest. Last it stops the proxy with SIGTERM and
// checks it exits 0.
//
// It writes a markdown fragment (-out) with the figures and a
// machine-readable line
//
//	<!-- load: p50_direct_us=… p50_proxy_us=… p99_direct_us=… p99_proxy_us=… rps_direct=… rps_proxy=… limited_ok=true -->
//
// Usage, from bench/:
//
//	go run ./cmd/loadtest -out out/load.md [-requests 20000] [-concurrency 16] [-rounds 5] [-sluice PATH]
//
// It exits 1, after writing the fragment, when the limiter miscounted, a
// request failed or the proxy did not exit 0; 2 for a usage error.
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

// pair is the allowed traffic measured at one concurrency, on each side:
// the upstream direct, through `sluice serve` with no rule (the proxy hop
// alone) and through `sluice serve` deciding every request.
type pair struct {
	concurrency, requests int
	direct, bare, proxy   loadgen.Result
	roundP50              [][3]time.Duration // per round: direct, bare, proxied
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.out, "out", "out/load.md", "the markdown `file` to write")
	fs.IntVar(&o.requests, "requests", 20000, "requests per side (direct, proxied) for the allowed traffic, over all rounds")
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
	failures        []string
	goVersion, when string
}

// The rules the proxy runs: "open" for traffic that is never limited (a
// budget of a billion per second), "limited" for L per user per day. A
// day-long token bucket refills one token per 86400/L seconds, so during a
// run of seconds each user gets exactly L.
const configTemplate = `store:
  backend: pebble
  dir: %q
  durability: interval
  flush_interval: 50ms
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

	cfg := filepath.Join(tmp, "sluice.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, configTemplate, filepath.Join(tmp, "state"), o.limit), 0o644); err != nil {
		return nil, err
	}
	p, err := serveproc.Start(bin, cfg, upURL, filepath.Join(tmp, "serve.log"), 30*time.Second)
	if err != nil {
		return nil, err
	}
	defer func() {
		if !p.Exited() {
			p.Stop(10 * time.Second)
		}
	}()
	proxyURL := "http://" + p.Listen
	// The same binary with no rule: every request passes the middleware
	// untouched, so this side is the reverse proxy's hop alone.
	bareCfg := filepath.Join(tmp, "bare.yaml")
	if err := os.WriteFile(bareCfg, []byte("store:\n  backend: memory\nrules: []\n"), 0o644); err != nil {
		return nil, err
	}
	bp, err := serveproc.Start(bin, bareCfg, upURL, filepath.Join(tmp, "bare.log"), 30*time.Second)
	if err != nil {
		return nil, err
	}
	defer func() {
		if !bp.Exited() {
			bp.Stop(10 * time.Second)
		}
	}()
	bareURL := "http://" + bp.Listen

	headers := make([]http.Header, o.callers)
	for i := range headers {
		headers[i] = http.Header{"X-User-Id": {fmt.Sprintf("open-%d", i)}}
	}
	allowed := func(_, seq int) loadgen.Request {
		return loadgen.Request{Path: "/open/item", Header: headers[seq%len(headers)]}
	}
	// One client per side, kept across rounds, so that both reuse their
	// connections alike.
	clients := map[string]*http.Client{
		upURL:    loadgen.NewClient(o.concurrency, 10*time.Second),
		bareURL:  loadgen.NewClient(o.concurrency, 10*time.Second),
		proxyURL: loadgen.NewClient(o.concurrency, 10*time.Second),
	}
	drive := func(base string, workers, n int) (*loadgen.Result, error) {
		return loadgen.Run(ctx, loadgen.Config{BaseURL: base, Workers: workers, Requests: n,
			Factory: allowed, Client: clients[base]})
	}
	// Warm up both sides: connections, the proxy's pools, the engine's keys.
	for _, base := range []string{upURL, bareURL, proxyURL} {
		if _, err := drive(base, o.concurrency, max(1000, 4*o.concurrency)); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	// measurePair drives n requests per side at the given concurrency, in
	// o.rounds rounds whose first side rotates.
	measurePair := func(workers, n int) (*pair, error) {
		per := n / o.rounds
		pr := &pair{concurrency: workers, requests: per * o.rounds}
		sides := []string{upURL, bareURL, proxyURL}
		results := []*loadgen.Result{&pr.direct, &pr.bare, &pr.proxy}
		for r := range o.rounds {
			var p50 [3]time.Duration
			for j := range sides {
				i := (r + j) % len(sides)
				res, err := drive(sides[i], workers, per)
				if err != nil {
					return nil, fmt.Errorf("round %d: %w", r+1, err)
				}
				results[i].Merge(res)
				p50[i] = res.Percentile(50)
			}
			pr.roundP50 = append(pr.roundP50, p50)
			fmt.Fprintf(logw, "loadtest: concurrency %d, round %d/%d: p50 direct %v, bare proxy %v, sluice %v\n", workers, r+1, o.rounds, p50[0], p50[1], p50[2])
		}
		for side, res := range map[string]*loadgen.Result{"direct": &pr.direct, "bare proxy": &pr.bare, "proxied": &pr.proxy} {
			if res.Errors > 0 || res.Status(http.StatusOK) != res.Requests {
				m.failures = append(m.failures, fmt.Sprintf("allowed traffic at concurrency %d, %s: %d of %d answered 200 (%v), %d transport errors %q",
					workers, side, res.Status(http.StatusOK), res.Requests, res.ByStatus, res.Errors, res.ErrorSample))
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

	// The limited traffic: K users, 3×L requests each, all at once.
	k, l := o.limitedCallers, o.limit
	lh := make([]http.Header, k)
	names := make([]string, k)
	for i := range lh {
		names[i] = fmt.Sprintf("limited-%d", i)
		lh[i] = http.Header{"X-User-Id": {names[i]}}
	}
	m.limited, err = loadgen.Run(ctx, loadgen.Config{BaseURL: proxyURL, Workers: o.concurrency, Requests: 3 * k * l,
		Client: clients[proxyURL],
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

	if code, err := bp.Stop(20 * time.Second); err != nil {
		m.failures = append(m.failures, "the bare proxy: "+err.Error())
	} else if code != 0 {
		m.failures = append(m.failures, fmt.Sprintf("the bare proxy exited with %d after SIGTERM, want 0; its log:\n%s", code, bp.Log()))
	}
	code, err := p.Stop(20 * time.Second)
	m.exitCode = code
	if err != nil {
		m.failures = append(m.failures, err.Error())
	} else if code != 0 {
		m.failures = append(m.failures, fmt.Sprintf("sluice serve exited with %d after SIGTERM, want 0; its log:\n%s", code, p.Log()))
	}
	return m, nil
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

// line is the machine-readable summary.
func (m *measurement) line() string {
	l := &m.loaded
	return fmt.Sprintf("<!-- load: p50_direct_us=%.1f p50_proxy_us=%.1f p99_direct_us=%.1f p99_proxy_us=%.1f rps_direct=%.1f rps_proxy=%.1f p50_bare_us=%.1f p99_bare_us=%.1f rps_bare=%.1f limited_ok=%t -->",
		us(l.direct.Percentile(50)), us(l.proxy.Percentile(50)), us(l.direct.Percentile(99)), us(l.proxy.Percentile(99)),
		l.direct.RPS(), l.proxy.RPS(), us(l.bare.Percentile(50)), us(l.bare.Percentile(99)), l.bare.RPS(), m.limitedOK)
}

func added(direct, proxy time.Duration) string {
	d := us(proxy) - us(direct)
	if direct <= 0 {
		return fmt.Sprintf("%+.0f µs", d)
	}
	return fmt.Sprintf("%+.0f µs (%+.0f%%)", d, 100*d/us(direct))
}

func (m *measurement) markdown() string {
	o := m.o
	var b strings.Builder
	fmt.Fprintf(&b, "## Gateway under load: `sluice serve` against the upstream direct\n\n")
	fmt.Fprintf(&b, "Measured %s by `go run ./cmd/loadtest` (bench/). Each table sends the same requests to the upstream "+
		"directly and through the proxy, in %d interleaved rounds (the side that goes first alternates), closed loop, "+
		"on one keep-alive connection per request in flight, from %d distinct users; everything on loopback (127.0.0.1) on one machine (%s/%s, %d CPUs, shared with the load generator "+
		"and the upstream), %s. The proxy is a `sluice serve` subprocess on Pebble (interval durability, 50 ms flush) "+
		"with a token bucket per user whose budget is never reached; the upstream is an in-process net/http handler "+
		"answering a 3-byte body. Latency is from sending the request to reading the body's last byte.\n\n",
		m.when, o.rounds, o.callers, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), m.goVersion)
	m.loaded.table(&b)
	if m.serial != nil {
		m.serial.table(&b)
		fmt.Fprintf(&b, "In a closed loop a side that saturates the CPUs answers in about concurrency ÷ throughput, so at "+
			"concurrency %d the percentiles are mostly queueing and compare capacity; one request at a time shows the cost "+
			"of the extra hop (a loopback connection, the reverse proxy and the limiter's decision) without it. "+
			"The load line below holds the concurrency-%d figures.\n\n", o.concurrency, o.concurrency)
	}
	status := "**ok**"
	if !m.limitedOK {
		status = "**FAILED**"
	}
	fmt.Fprintf(&b, "Limiter under load (%s): %d users × %d requests at once against a token bucket of %d per user per day: %s.\n\n",
		status, o.limitedCallers, 3*o.limit, o.limit, m.limitedDetail)
	fmt.Fprintf(&b, "SIGTERM at the end: exit status %d.\n\n", m.exitCode)
	b.WriteString(m.line())
	b.WriteString("\n")
	return b.String()
}

// table writes the pair's table and its per-round medians.
func (p *pair) table(b *strings.Builder) {
	fmt.Fprintf(b, "Concurrency %d, %d requests per side:\n\n", p.concurrency, p.requests)
	fmt.Fprintf(b, "| | p50 | p90 | p99 | max | req/s |\n|---|---:|---:|---:|---:|---:|\n")
	row := func(name string, r *loadgen.Result) {
		fmt.Fprintf(b, "| %s | %.0f µs | %.0f µs | %.0f µs | %.0f µs | %.0f |\n", name,
			us(r.Percentile(50)), us(r.Percentile(90)), us(r.Percentile(99)), us(r.Max()), r.RPS())
	}
	row("direct", &p.direct)
	row("through `sluice serve`, no rule (the proxy hop)", &p.bare)
	row("through `sluice serve`, deciding every request", &p.proxy)
	addedRow := func(name string, from, to *loadgen.Result) {
		ratio := 0.0
		if from.RPS() > 0 {
			ratio = to.RPS() / from.RPS()
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | | ×%.2f |\n", name,
			added(from.Percentile(50), to.Percentile(50)),
			added(from.Percentile(90), to.Percentile(90)),
			added(from.Percentile(99), to.Percentile(99)), ratio)
	}
	addedRow("added by `sluice serve` (vs direct)", &p.direct, &p.proxy)
	addedRow("added by the limiter (vs no rule)", &p.bare, &p.proxy)
	b.WriteString("\n")
	var rounds []string
	for _, r := range p.roundP50 {
		rounds = append(rounds, fmt.Sprintf("%.0f/%.0f/%.0f", us(r[0]), us(r[1]), us(r[2])))
	}
	fmt.Fprintf(b, "p50 per round, direct/no rule/deciding, µs: %s.\n\n", strings.Join(rounds, ", "))
}
