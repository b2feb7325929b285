// Command soak runs `sluice serve` as a real process on a Pebble store for
// a while under a bounded loopback load from many callers, reloading its
// configuration every few seconds, and then checks that it behaved:
//
//   - no 5xx answer and no transport error, invalid reloads included;
//   - no caller got more 200s under a rule than the most permissive of
//     the alternating configurations could allow over the elapsed time;
//   - the process's resident memory stayed under -max-rss;
//   - /metrics counted every reload, the rejected ones as errors, and no
//     flush failed; /rules shows the configuration last written;
//   - SIGTERM stops it with status 0, and the store it leaves reopens
//     (sluice inspect) holding every caller's record, none corrupt.
//
// Usage:
//
//	go run ./internal/cmd/soak [-duration 2m] [-dir DIR] [-sluice PATH]
//	    [-rate 400] [-workers 8] [-reload-every 3s] [-max-rss 128]
//
// It prints a summary and exits 0, or names each failed check and exits 1
// (2 for a usage error).
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/internal/loadgen"
	"github.com/sluice-go/sluice/internal/loadgen/serveproc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// options are soak's parsed command line.
type options struct {
	duration    time.Duration
	dir         string
	sluice      string
	rate        int
	workers     int
	reloadEvery time.Duration
	maxRSSMiB   int64
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", 2*time.Minute, "how long to drive the load")
	fs.StringVar(&o.dir, "dir", "", "the Pebble store `directory`; a temporary one, removed afterwards, when empty")
	fs.StringVar(&o.sluice, "sluice", "", "the sluice `binary` to run; built from ./cmd/sluice when empty")
	fs.IntVar(&o.rate, "rate", 400, "the most requests per second to send, over all workers")
	fs.IntVar(&o.workers, "workers", 8, "how many requests are in flight at most")
	fs.DurationVar(&o.reloadEvery, "reload-every", 3*time.Second, "the time between two configuration changes (rewrite or SIGHUP)")
	fs.Int64Var(&o.maxRSSMiB, "max-rss", 128, "the resident memory, in `MiB`, the serve process must stay under")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.duration < time.Second:
		return nil, fmt.Errorf("-duration %v: want at least 1s", o.duration)
	case o.rate < 1:
		return nil, fmt.Errorf("-rate %d: want a positive rate", o.rate)
	case o.workers < 1:
		return nil, fmt.Errorf("-workers %d: want at least 1", o.workers)
	case o.reloadEvery < 300*time.Millisecond:
		return nil, fmt.Errorf("-reload-every %v: want at least 300ms (the watcher debounces changes for 100ms)", o.reloadEvery)
	case o.duration < 2*o.reloadEvery:
		return nil, fmt.Errorf("-duration %v is too short for -reload-every %v: want room for at least two reloads", o.duration, o.reloadEvery)
	case o.maxRSSMiB < 1:
		return nil, fmt.Errorf("-max-rss %d: want a positive size in MiB", o.maxRSSMiB)
	}
	return o, nil
}

// run is the whole soak; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "soak: %v\n", err)
		return 2
	}
	failures, err := soak(ctx, o, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "soak: %v\n", err)
		return 1
	}
	if len(failures) > 0 {
		for _, f := range failures {
			fmt.Fprintf(stderr, "soak: FAIL: %s\n", f)
		}
		return 1
	}
	fmt.Fprintln(stdout, "soak: PASS")
	return 0
}

// variant is one of the two valid configurations the soak alternates
// between: the same rules (names, algorithms, windows, paths, costs) with
// different limits, so that every rule keeps its callers' spent budget
// across a reload and the bound of checkBounds applies.
type variant struct {
	name                           string
	orders, search, reports, other int64 // the rules' limits per minute
}

var variants = [2]variant{
	{name: "A", orders: 20, search: 50, reports: 30, other: 100},
	{name: "B", orders: 40, search: 100, reports: 60, other: 200},
}

// window is every rule's window.
const window = time.Minute

// rule describes one rule of the configurations as the bound needs it.
type rule struct {
	name      string
	algorithm string
	cost      int64
	limit     func(variant) int64
}

var rules = map[string]rule{
	"orders-write": {"orders-write", "token_bucket", 1, func(v variant) int64 { return v.orders }},
	"search":       {"search", "sliding_counter", 5, func(v variant) int64 { return v.search }},
	"reports":      {"reports", "gcra", 1, func(v variant) int64 { return v.reports }},
	"catch-all":    {"catch-all", "sliding_counter", 1, func(v variant) int64 { return v.other }},
}

// configText is the gateway configuration of variant v on a Pebble store
// in dir: the shape of testdata/gateway.yaml, with one rule per scope.
func configText(v variant, dir string) string {
	return fmt.Sprintf(`# soak configuration %s
store:
  backend: pebble
  dir: %q
  durability: interval
  flush_interval: 50ms
identity:
  user_header: X-User-ID
  api_key_header: X-API-Key
  trusted_proxies: [127.0.0.1/32]
on_store_error: open
match: most_specific
rules:
  - name: orders-write
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: token_bucket
    limit: %d
    window: 1m
  - name: search
    method: GET
    path_prefix: /api/search
    scope: user
    algorithm: sliding_counter
    limit: %d
    window: 1m
    cost: 5
  - name: reports
    method: GET
    path_prefix: /api/reports
    scope: api_key
    algorithm: gcra
    limit: %d
    window: 1m
default:
  name: catch-all
  scope: ip
  algorithm: sliding_counter
  limit: %d
  window: 1m
`, v.name, dir, v.orders, v.search, v.reports, v.other)
}

// invalidText is the n-th invalid configuration: each is refused for
// another reason, and each differs from the last so that the watcher
// reads it.
func invalidText(n int, dir string) string {
	valid := configText(variants[0], dir)
	switch n % 3 {
	case 0: // a duration time.ParseDuration refuses
		return strings.Replace(valid, "window: 1m\n", "window: 1 minute\n", 1) + fmt.Sprintf("# invalid %d\n", n)
	case 1: // an unknown key
		return valid + fmt.Sprintf("colour: blue # invalid %d\n", n)
	default: // comments only: an empty document, as a half-written file reads
		return fmt.Sprintf("# invalid %d: the file is being written\n", n)
	}
}

// writeConfig replaces the file at path with data the way a deployment
// does: write a temporary file in the same directory, then rename it.
func writeConfig(path, data string) error {
	tmp := filepath.Join(filepath.Dir(path), ".soak-config.tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// caller is one identity the load speaks as, on one rule's path.
type caller struct {
	rule   string
	label  string // rule|identity, the loadgen caller name
	method string
	path   string
	header http.Header
	key    string // the key the gateway stores the caller's state under
}

// callers returns the soak's identities, tagged with run so that a reused
// store directory holds nobody else's budget: users on two user-scoped
// rules, API keys on an api_key-scoped one, and anonymous clients behind
// the trusted loopback proxy (X-Forwarded-For) on the IP-scoped default.
func callers(run uint32) []caller {
	var cs []caller
	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("u%d-%08x", i, run)
		h := http.Header{"X-User-Id": {id}}
		cs = append(cs,
			caller{rule: "orders-write", label: "orders-write|" + id, method: http.MethodPost, path: "/api/orders", header: h, key: "user:" + id},
			caller{rule: "search", label: "search|" + id, method: http.MethodGet, path: "/api/search?q=x", header: h, key: "user:" + id})
	}
	for i := 1; i <= 3; i++ {
		k := fmt.Sprintf("key-%d-%08x", i, run)
		sum := sha256.Sum256([]byte(k))
		cs = append(cs, caller{rule: "reports", label: "reports|" + k, method: http.MethodGet, path: "/api/reports/daily",
			header: http.Header{"X-Api-Key": {k}}, key: "key:" + hex.EncodeToString(sum[:16])})
	}
	for i := 1; i <= 3; i++ {
		ip := fmt.Sprintf("10.%d.%d.%d", byte(run>>8), byte(run), i)
		cs = append(cs, caller{rule: "catch-all", label: "catch-all|" + ip, method: http.MethodGet, path: "/public/page",
			header: http.Header{"X-Forwarded-For": {ip}}, key: "ip:" + ip})
	}
	return cs
}

// maxAllowed is the most requests a caller can be allowed under r in
// elapsed time, whichever of the variants is in force at each moment:
//
//   - token_bucket and gcra, capacity C = Limit and refill rate
//     R = Limit/Window: whatever the reloads, what was spent is at most
//     what the bucket held at first (at most C_max) plus what it refilled
//     (at most R_max × elapsed), so
//     allowed ≤ floor((L_max + L_max × elapsed/Window) / cost) + 1,
//     the +1 for rounding at the bucket's edges;
//   - sliding_counter: a request is allowed only if the current fixed
//     window's count plus its cost stays within the limit, so each fixed
//     window allows at most floor(L_max/cost), and elapsed spans at most
//     floor(elapsed/Window) + 2 fixed windows:
//     allowed ≤ (floor(elapsed/Window) + 2) × floor(L_max/cost).
//
// L_max is the rule's largest limit over the variants (all share the
// window, the algorithm and the cost, so the budget carries over a reload).
func maxAllowed(r rule, elapsed time.Duration) int64 {
	var lmax int64
	for _, v := range variants {
		lmax = max(lmax, r.limit(v))
	}
	switch r.algorithm {
	case "sliding_counter":
		return (int64(elapsed/window) + 2) * (lmax / r.cost)
	default:
		return int64((float64(lmax)+float64(lmax)*elapsed.Seconds()/window.Seconds())/float64(r.cost)) + 1
	}
}

// reloads counts what the reloader did.
type reloads struct {
	writes, invalid, hups int
	last                  variant // the valid configuration last put in the file
}

// reloader changes the configuration every o.reloadEvery until ctx ends,
// by the cycle B, A, SIGHUP, invalid, B, SIGHUP, invalid, A: a valid file
// always follows an invalid one and a SIGHUP always re-reads a valid one,
// so every change is counted once by the watcher, as ok or as error.
func reloader(ctx context.Context, o *options, p *serveproc.Process, path, dir string, out *reloads) error {
	cycle := []string{"B", "A", "hup", "bad", "B", "hup", "bad", "A"}
	t := time.NewTicker(o.reloadEvery)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		var err error
		switch step := cycle[i%len(cycle)]; step {
		case "A", "B":
			v := variants[0]
			if step == "B" {
				v = variants[1]
			}
			err = writeConfig(path, configText(v, dir))
			out.writes++
			out.last = v
		case "hup":
			err = p.Signal(syscall.SIGHUP)
			out.hups++
		case "bad":
			err = writeConfig(path, invalidText(out.invalid, dir))
			out.invalid++
		}
		if err != nil {
			return fmt.Errorf("reload step %d: %w", i, err)
		}
	}
}

// memory is the serve process's memory as sampled.
type memory struct {
	mu      sync.Mutex
	samples int
	maxRSS  int64
	errs    int
}

func (m *memory) sample(pid int) {
	mm, err := serveproc.ReadMemory(pid)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.errs++
		return
	}
	m.samples++
	m.maxRSS = max(m.maxRSS, mm.RSS)
}

func soak(ctx context.Context, o *options, stdout io.Writer) ([]string, error) {
	tmp, err := os.MkdirTemp("", "sluice-soak-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	dir := o.dir
	if dir == "" {
		dir = filepath.Join(tmp, "state")
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	bin, err := serveproc.Binary(ctx, o.sluice, ".", tmp)
	if err != nil {
		return nil, err
	}
	upURL, closeUp, err := serveproc.Upstream(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "upstream ok\n")
	}))
	if err != nil {
		return nil, err
	}
	defer closeUp()

	cfgDir := filepath.Join(tmp, "config")
	if err := os.Mkdir(cfgDir, 0o755); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(cfgDir, "sluice.yaml")
	if err := writeConfig(cfgPath, configText(variants[0], dir)); err != nil {
		return nil, err
	}
	p, err := serveproc.Start(bin, cfgPath, upURL, filepath.Join(tmp, "serve.log"), 30*time.Second)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			p.Stop(10 * time.Second)
		}
	}()
	admin := "http://" + p.Admin

	// Memory, every second.
	var mem memory
	mctx, mstop := context.WithCancel(ctx)
	defer mstop()
	var mwg sync.WaitGroup
	mwg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		mem.sample(p.Pid())
		for {
			select {
			case <-mctx.Done():
				return
			case <-t.C:
				mem.sample(p.Pid())
			}
		}
	})

	// Reloads, until the load ends.
	rl := reloads{last: variants[0]}
	rctx, rstop := context.WithCancel(ctx)
	defer rstop()
	rerr := make(chan error, 1)
	go func() { rerr <- reloader(rctx, o, p, cfgPath, dir, &rl) }()

	// The load.
	runID := uint32(time.Now().UnixNano())
	cs := callers(runID)
	pace := time.Duration(int64(time.Second) * int64(o.workers) / int64(o.rate))
	res, lerr := loadgen.Run(ctx, loadgen.Config{
		BaseURL:  "http://" + p.Listen,
		Workers:  o.workers,
		Duration: o.duration,
		Pace:     pace,
		Factory: func(_, seq int) loadgen.Request {
			c := cs[seq%len(cs)]
			return loadgen.Request{Method: c.method, Path: c.path, Header: c.header, Caller: c.label}
		},
	})
	rstop()
	if err := <-rerr; err != nil {
		return nil, err
	}
	if lerr != nil {
		return nil, fmt.Errorf("load: %w", lerr)
	}

	var failures []string
	fail := func(format string, a ...any) { failures = append(failures, fmt.Sprintf(format, a...)) }

	// Answers.
	if res.Errors > 0 {
		fail("transport errors: %d of %d requests got no answer, such as %q", res.Errors, res.Requests, res.ErrorSample)
	}
	if n := res.Class(5); n > 0 {
		fail("5xx answers: %d of %d (%v)", n, res.Requests, res.ByStatus)
	}
	if res.NoRetryAfter > 0 {
		fail("429 without Retry-After: %d", res.NoRetryAfter)
	}
	if res.Status(http.StatusOK) == 0 || res.Status(http.StatusTooManyRequests) == 0 {
		fail("statuses %v: want both 200s and 429s (the load should exceed some budgets)", res.ByStatus)
	}
	// Bounds, per caller and rule.
	elapsed := res.Elapsed
	for _, c := range cs {
		got := int64(allowedOf(res, c.label))
		if bound := maxAllowed(rules[c.rule], elapsed); got > bound {
			fail("caller %s: %d requests allowed in %v, over the bound %d", c.label, got, elapsed.Round(time.Millisecond), bound)
		}
	}

	// Reload counters: let the last change be read (100ms debounce, then
	// 500ms for the file to settle) first.
	wantOK, wantErr := float64(rl.writes+rl.hups), float64(rl.invalid)
	var m map[string]float64
	for deadline := time.Now().Add(5 * time.Second); ; {
		if m, err = scrape(admin + "/metrics"); err != nil {
			return nil, err
		}
		if m[`sluice_config_reloads_total{result="ok"}`] == wantOK && m[`sluice_config_reloads_total{result="error"}`] == wantErr {
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	gotOK, gotErr := m[`sluice_config_reloads_total{result="ok"}`], m[`sluice_config_reloads_total{result="error"}`]
	if gotOK != wantOK || wantOK == 0 {
		fail("reloads: /metrics counted %v successful, want %v (%d valid writes, %d SIGHUPs)", gotOK, wantOK, rl.writes, rl.hups)
	}
	if gotErr != wantErr {
		fail("reloads: /metrics counted %v rejected, want %v (the invalid writes)", gotErr, wantErr)
	}
	if n := m["sluice_flush_errors_total"]; n != 0 {
		fail("store: %v failed flushes", n)
	}
	if n := m["sluice_engine_store_errors_total"]; n != 0 {
		fail("store: %v engine store errors", n)
	}
	if limit, err := ruleLimit(admin+"/rules", "orders-write"); err != nil {
		fail("/rules: %v", err)
	} else if limit != rl.last.orders {
		fail("/rules: orders-write limit %d, want %d (configuration %s, the last valid one written)", limit, rl.last.orders, rl.last.name)
	}

	// Memory: the last sample and the peak.
	mstop()
	mwg.Wait()
	final, err := serveproc.ReadMemory(p.Pid())
	if err != nil {
		return nil, err
	}
	limit := o.maxRSSMiB << 20
	if mem.maxRSS > limit || final.HWM > limit {
		fail("memory: VmRSS peaked at %.1f MiB sampled, VmHWM %.1f MiB; the bound is %d MiB", mib(mem.maxRSS), mib(final.HWM), o.maxRSSMiB)
	}
	if mem.samples < int(o.duration/time.Second)/2 {
		fail("memory: only %d samples (%d failed reads) over %v", mem.samples, mem.errs, o.duration)
	}

	// Stop, and reopen the store.
	code, err := p.Stop(20 * time.Second)
	stopped = true
	if err != nil {
		fail("SIGTERM: %v", err)
	} else if code != 0 {
		fail("SIGTERM: serve exited with status %d, want 0; log tail:\n%s", code, lastLines(p.Log(), 20))
	}
	if strings.Contains(p.Log(), "panic") {
		fail("the serve log holds a panic:\n%s", lastLines(p.Log(), 40))
	}
	records, corrupt, err := inspect(ctx, bin, dir)
	if err != nil {
		fail("reopening the store: %v", err)
	} else {
		if corrupt > 0 {
			fail("store: %d corrupt records after the restart", corrupt)
		}
		for _, c := range cs {
			// inspect shows a caller's key as identity.ShowKey does.
			if allowedOf(res, c.label) > 0 && !records[c.rule+"\x00"+identity.ShowKey(c.key)] {
				fail("store: no record of %s (key %s) after SIGTERM, though it was allowed requests", c.label, c.key)
			}
		}
	}

	// The summary.
	fmt.Fprintf(stdout, "soak: %v of load, %d requests (%.0f/s), %d workers, store %s\n",
		elapsed.Round(time.Millisecond), res.Requests, res.RPS(), o.workers, dir)
	codes := make([]int, 0, len(res.ByStatus))
	for c := range res.ByStatus {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	fmt.Fprint(stdout, "soak: statuses")
	for _, c := range codes {
		fmt.Fprintf(stdout, " %d×%d", c, res.ByStatus[c])
	}
	fmt.Fprintf(stdout, "; %d transport errors; latency p50 %v p99 %v max %v\n", res.Errors,
		res.Percentile(50).Round(time.Microsecond), res.Percentile(99).Round(time.Microsecond), res.Max().Round(time.Microsecond))
	for _, name := range []string{"orders-write", "search", "reports", "catch-all"} {
		var most int
		for _, c := range cs {
			if c.rule == name {
				most = max(most, allowedOf(res, c.label))
			}
		}
		fmt.Fprintf(stdout, "soak: rule %-12s most 200s for one caller %d, bound %d\n", name, most, maxAllowed(rules[name], elapsed))
	}
	fmt.Fprintf(stdout, "soak: reloads %v ok (%d writes + %d SIGHUP), %v rejected (%d invalid writes)\n",
		gotOK, rl.writes, rl.hups, gotErr, rl.invalid)
	fmt.Fprintf(stdout, "soak: memory VmRSS max %.1f MiB over %d samples, VmHWM %.1f MiB (bound %d MiB)\n",
		mib(mem.maxRSS), mem.samples, mib(final.HWM), o.maxRSSMiB)
	fmt.Fprintf(stdout, "soak: SIGTERM exit %d; store reopened with %d records, %d corrupt\n", code, len(records), corrupt)
	return failures, nil
}

// allowedOf returns how many 200s the named caller got.
func allowedOf(res *loadgen.Result, label string) int {
	if cs := res.ByCaller[label]; cs != nil {
		return cs.ByStatus[http.StatusOK]
	}
	return 0
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// scrape reads a Prometheus text exposition into series → value; the
// series is the name with its labels as printed.
func scrape(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: status %d", url, resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// ruleLimit returns the limit /rules shows for the named rule.
func ruleLimit(url, name string) (int64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Rules []struct {
			Name  string `json:"name"`
			Limit int64  `json:"limit"`
		} `json:"rules"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, fmt.Errorf("decoding: %w", err)
	}
	for _, r := range body.Rules {
		if r.Name == name {
			return r.Limit, nil
		}
	}
	return 0, fmt.Errorf("no rule %q", name)
}

// inspect lists the store in dir with `sluice inspect`, which opens it as
// the gateway does; it returns the set of namespace+"\x00"+key present and
// how many records were corrupt.
func inspect(ctx context.Context, bin, dir string) (map[string]bool, int, error) {
	cmd := exec.CommandContext(ctx, bin, "inspect", "--backend", "pebble", "--dir", dir, "--json", "--limit", "0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, 0, fmt.Errorf("sluice inspect: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	records := map[string]bool{}
	corrupt := 0
	for line := range strings.Lines(string(out)) {
		var rec struct {
			Namespace string `json:"namespace"`
			Key       string `json:"key"`
			Corrupt   bool   `json:"corrupt"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			return nil, 0, fmt.Errorf("sluice inspect: line %q: %w", strings.TrimSpace(line), err)
		}
		if rec.Corrupt {
			corrupt++
		}
		records[rec.Namespace+"\x00"+rec.Key] = true
	}
	return records, corrupt, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
