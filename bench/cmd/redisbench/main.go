// Command redisbench measures the Redis-backed rate limiters side by side
// against one redis-server, in one run: Sluice with each algorithm over
// backend/redis, the Redis-backed peers the module proxy serves
// (redis_rate, throttled's go-redis store, ulule's Redis store), and three
// floors, one EVALSHA of a trivial script per call through go-redis, through
// go-redis' AutoPipeline and through rueidis.
//
// For each library, workload (one hot key; 100,000 keys taken in turn) and
// number of concurrent callers (1, 16, 64) it runs a closed loop for
// -duration and records decisions/s, the p50 and p99 of a decision's
// latency, and from the server's counters (INFO commandstats and
// total_reads_processed, read before and after) the round trips, scripts
// and commands per decision; for Sluice also the compare-and-swaps and
// conflicts its engine counted, whose ratio to the decisions is the
// coalescing batch. Libraries are interleaved within a round and rounds
// repeated (-rounds); the tables give each figure's median over the rounds.
//
// Then the accuracy trial: for each library, -acc-procs processes (this
// program run again with a hidden flag) of -acc-goroutines goroutines each
// make -acc-tries calls on one key under a limit of -acc-limit per thousand
// hours; the admitted calls are summed and set against the limit.
//
// It starts its own redis-server (redis-server must be on PATH) unless
// -addr names one, which it empties (FLUSHALL) before every run. Run it from
// bench/:
//
//	go run ./cmd/redisbench -out out/redis.md
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/bench"
)

// config is the run's flags.
type config struct {
	addr      string
	out       string
	duration  time.Duration
	rounds    int
	callers   []int
	workloads []string
	libs      []string
	timeout   time.Duration
	cacheSize int
	keys      int

	accuracy      bool
	accProcs      int
	accGoroutines int
	accTries      int
	accLimit      int64
	accDelay      time.Duration // from starting the children to their common start

	// The child's flags.
	child      string
	childStart int64
}

func main() {
	c := config{accDelay: 2 * time.Second}
	var callers, workloads, libs string
	flag.StringVar(&c.addr, "addr", "", "host:port of a redis-server to use (it is flushed before every run); empty starts one")
	flag.StringVar(&c.out, "out", "", "file to write the markdown report to (default: standard output)")
	flag.DurationVar(&c.duration, "duration", 1200*time.Millisecond, "how long each library runs each workload at each number of callers, per round")
	flag.IntVar(&c.rounds, "rounds", 4, "rounds; each figure is the median over them")
	flag.StringVar(&callers, "callers", "1,16,64", "numbers of concurrent callers, comma-separated")
	flag.StringVar(&workloads, "workloads", "hot,keys100k", "workloads, comma-separated: hot (one key), keys100k (100,000 keys in turn)")
	flag.StringVar(&libs, "libs", "", "libraries, comma-separated (default: all; see -list)")
	flag.DurationVar(&c.timeout, "timeout", time.Second, "Sluice's per-call deadline (redis.Options.Timeout; the store's default is 50ms)")
	flag.IntVar(&c.cacheSize, "swap-cache", 0, "Sluice's engine.SwapOptions.CacheSize (0: the engine's default)")
	flag.IntVar(&c.keys, "keys", 100_000, "the keys of the keys100k workload")
	flag.BoolVar(&c.accuracy, "accuracy", true, "run the accuracy trial across processes")
	flag.IntVar(&c.accProcs, "acc-procs", 4, "accuracy: processes")
	flag.IntVar(&c.accGoroutines, "acc-goroutines", 16, "accuracy: goroutines per process")
	flag.IntVar(&c.accTries, "acc-tries", 100, "accuracy: calls per goroutine")
	flag.Int64Var(&c.accLimit, "acc-limit", bench.RedisAccuracyRate.Limit, "accuracy: the limit, per thousand hours")
	list := flag.Bool("list", false, "list the libraries and exit")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the measured runs to this file")
	flag.StringVar(&c.child, "child-accuracy", "", "internal: run as an accuracy child for this library")
	flag.Int64Var(&c.childStart, "child-start", 0, "internal: the accuracy child's start, Unix ns")
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments %q", flag.Args()))
	}
	if *list {
		for _, l := range bench.RedisLibraries() {
			fmt.Println(l.Name)
		}
		return
	}
	if c.child != "" {
		if err := runChild(c); err != nil {
			fail(err)
		}
		return
	}
	var err error
	if c.callers, err = parseInts(callers); err != nil {
		fail(fmt.Errorf("-callers: %w", err))
	}
	c.workloads = splitList(workloads)
	for _, w := range c.workloads {
		if w != "hot" && w != "keys100k" {
			fail(fmt.Errorf("-workloads: unknown workload %q", w))
		}
	}
	c.libs = splitList(libs)
	if c.rounds < 1 || c.duration <= 0 || c.keys < 1 || c.keys > bench.MaxKeys {
		fail(fmt.Errorf("-rounds and -duration must be positive, -keys in [1, %d]", bench.MaxKeys))
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if err := run(c); err != nil {
		pprof.StopCPUProfile()
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "redisbench: %v\n", err)
	os.Exit(1)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("none given")
	}
	return out, nil
}

// libraries returns the libraries the run measures.
func (c config) libraries() ([]bench.RedisLibrary, error) {
	if len(c.libs) == 0 {
		return bench.RedisLibraries(), nil
	}
	var out []bench.RedisLibrary
	for _, name := range c.libs {
		l, err := bench.RedisLibraryNamed(name)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// cell is one measurement: a library on a workload at a number of callers,
// in one round.
type cell struct {
	perSec           float64
	p50, p99         time.Duration
	decisions        uint64
	denied, errs     uint64
	firstErr         string
	reads, scripts   int64
	commands         int64
	swaps, conflicts uint64
	hasSwaps         bool
	calls            map[string]int64
	setupErr         string
	warmNote         string
}

type cellKey struct {
	workload string
	callers  int
	lib      string
}

func run(c config) error {
	libs, err := c.libraries()
	if err != nil {
		return err
	}
	addr := c.addr
	if addr == "" {
		srv, err := redistest.NewServer()
		if err != nil {
			return err
		}
		defer srv.Kill()
		addr = srv.Addr
	}
	admin := goredis.NewClient(&goredis.Options{Addr: addr})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", addr, err)
	}
	cfg := bench.RedisConfig{Addr: addr, Timeout: c.timeout, SwapCacheSize: c.cacheSize}
	began := time.Now()
	loadBefore := loadAverage()
	results := map[cellKey][]cell{}
	for round := range c.rounds {
		for _, w := range c.workloads {
			// Interleave: each round starts the libraries at a different
			// place in the list.
			for i := range libs {
				lib := libs[(i+round)%len(libs)]
				fmt.Fprintf(os.Stderr, "round %d/%d %s %s\n", round+1, c.rounds, w, lib.Name)
				cells := measure(ctx, admin, cfg, lib, w, c)
				for n, cl := range cells {
					k := cellKey{w, c.callers[n], lib.Name}
					results[k] = append(results[k], cl)
				}
			}
		}
	}
	var acc []accuracyRow
	if c.accuracy {
		for _, lib := range libs {
			if lib.Floor {
				continue
			}
			fmt.Fprintf(os.Stderr, "accuracy %s\n", lib.Name)
			acc = append(acc, accuracy(ctx, admin, addr, lib, c))
		}
	}
	version, _ := serverVersion(ctx, admin)
	var buf bytes.Buffer
	report(&buf, c, libs, results, acc, version, began, time.Since(began), loadBefore+" at the start, "+loadAverage()+" at the end")
	if c.out == "" {
		_, err := os.Stdout.Write(buf.Bytes())
		return err
	}
	if dir := filepath.Dir(c.out); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(c.out, buf.Bytes(), 0o644)
}

// measure runs lib on workload w at every number of callers, on one fresh
// limiter over an empty server, after a warm-up (on 100,000 keys, a pass over
// them all, so that each run finds every key's record in place).
func measure(ctx context.Context, admin *goredis.Client, cfg bench.RedisConfig, lib bench.RedisLibrary, w string, c config) []cell {
	cells := make([]cell, len(c.callers))
	setupFail := func(err error) []cell {
		for i := range cells {
			cells[i].setupErr = err.Error()
		}
		return cells
	}
	if err := bench.FlushRedis(ctx, admin); err != nil {
		return setupFail(err)
	}
	hot := w == "hot"
	lim, err := lib.New(cfg, bench.RedisRateFor(lib, hot))
	if err != nil {
		return setupFail(err)
	}
	defer lim.Close()
	keys := []string{"hot-key"}
	warm := bench.Load{Keys: keys, Callers: 1, Count: 100}
	if !hot {
		keys = bench.Keys(c.keys)
		warm = bench.Load{Keys: keys, Callers: 64, Count: len(keys)}
	}
	if lib.Floor {
		warm.Count = 100
	}
	// A warm-up that failed throughout leaves nothing to measure; a few
	// failed calls (a deadline missed on a busy machine, and the breaker
	// open after it) are noted and the runs go ahead.
	warmNote := ""
	if r := warm.Run(lim); r.Errors == r.Decisions {
		return setupFail(fmt.Errorf("warm-up: every call failed, the first: %v", r.FirstErr))
	} else if r.Errors > 0 {
		warmNote = fmt.Sprintf("%d of the warm-up's %d calls failed, the first: %v", r.Errors, r.Decisions, r.FirstErr)
	}
	sc, _ := lim.(bench.SwapCounter)
	for i, n := range c.callers {
		before, err := bench.ReadServerCounters(ctx, admin)
		if err != nil {
			return setupFail(err)
		}
		var s0 bench.SwapStats
		if sc != nil {
			s0 = sc.SwapStats()
		}
		r := bench.Load{Keys: keys, Callers: n, Duration: c.duration}.Run(lim)
		var s1 bench.SwapStats
		if sc != nil {
			s1 = sc.SwapStats()
		}
		after, err := bench.ReadServerCounters(ctx, admin)
		if err != nil {
			return setupFail(err)
		}
		d := after.Delta(before)
		cl := cell{
			perSec: r.PerSecond(), p50: r.Latency.Quantile(0.50), p99: r.Latency.Quantile(0.99),
			decisions: r.Decisions, denied: r.Denied, errs: r.Errors,
			reads: d.Reads, scripts: d.Scripts, commands: d.Commands, calls: d.Calls,
			swaps: s1.Swaps - s0.Swaps, conflicts: s1.Conflicts - s0.Conflicts, hasSwaps: sc != nil,
		}
		if r.FirstErr != nil {
			cl.firstErr = r.FirstErr.Error()
		}
		if i == 0 {
			cl.warmNote = warmNote
		}
		cells[i] = cl
	}
	return cells
}

// accuracyRow is one library's accuracy trial.
type accuracyRow struct {
	lib                    bench.RedisLibrary
	admitted, denied, errs uint64
	elapsed                time.Duration
	firstErr               string
	tries                  int
}

// childResult is what an accuracy child prints.
type childResult struct {
	Admitted, Denied, Errors uint64
	FirstErr                 string
	Elapsed                  time.Duration
}

// accuracy runs lib's accuracy trial: c.accProcs children of this program,
// each spending one key from c.accGoroutines goroutines, started together.
func accuracy(ctx context.Context, admin *goredis.Client, addr string, lib bench.RedisLibrary, c config) accuracyRow {
	row := accuracyRow{lib: lib, tries: c.accProcs * c.accGoroutines * c.accTries}
	if err := bench.FlushRedis(ctx, admin); err != nil {
		row.firstErr = err.Error()
		return row
	}
	exe, err := os.Executable()
	if err != nil {
		row.firstErr = err.Error()
		return row
	}
	start := time.Now().Add(c.accDelay)
	type out struct {
		res childResult
		err error
	}
	outs := make([]out, c.accProcs)
	var wg sync.WaitGroup
	for p := range c.accProcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(cctx, exe,
				"-child-accuracy", lib.Name, "-addr", addr,
				"-child-start", strconv.FormatInt(start.UnixNano(), 10),
				"-acc-goroutines", strconv.Itoa(c.accGoroutines), "-acc-tries", strconv.Itoa(c.accTries),
				"-acc-limit", strconv.FormatInt(c.accLimit, 10),
				"-timeout", c.timeout.String(), "-swap-cache", strconv.Itoa(c.cacheSize))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			b, err := cmd.Output()
			if err != nil {
				outs[p].err = fmt.Errorf("child %d: %v: %s", p, err, strings.TrimSpace(stderr.String()))
				return
			}
			outs[p].err = json.Unmarshal(b, &outs[p].res)
		}()
	}
	wg.Wait()
	for _, o := range outs {
		if o.err != nil {
			if row.firstErr == "" {
				row.firstErr = o.err.Error()
			}
			continue
		}
		row.admitted += o.res.Admitted
		row.denied += o.res.Denied
		row.errs += o.res.Errors
		row.elapsed = max(row.elapsed, o.res.Elapsed)
		if row.firstErr == "" {
			row.firstErr = o.res.FirstErr
		}
	}
	return row
}

// runChild is one accuracy process: it builds its own limiter, waits for
// the common start and spends the key, then prints what it was admitted.
func runChild(c config) error {
	lib, err := bench.RedisLibraryNamed(c.child)
	if err != nil {
		return err
	}
	r := bench.RedisAccuracyRate
	r.Limit = c.accLimit
	lim, err := lib.New(bench.RedisConfig{Addr: c.addr, Timeout: c.timeout, SwapCacheSize: c.cacheSize}, r)
	if err != nil {
		return err
	}
	defer lim.Close()
	time.Sleep(time.Until(time.Unix(0, c.childStart)))
	t0 := time.Now()
	a, d, e, ferr := bench.Spend(lim, "accuracy-key", c.accGoroutines, c.accTries, t0.Add(time.Minute))
	res := childResult{Admitted: a, Denied: d, Errors: e, Elapsed: time.Since(t0)}
	if ferr != nil {
		res.FirstErr = ferr.Error()
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

func serverVersion(ctx context.Context, c *goredis.Client) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", errors.New("no redis_version")
}

// median is the middle of the rounds' figures, for each figure.
type median struct {
	perSec                  float64
	p50, p99                time.Duration
	rt, scripts, cmds       float64
	batch, conflictsPerSwap float64
	hasSwaps                bool
	denied, errs            uint64
	firstErr                string
	warmNotes               []string
	calls                   map[string]float64
	n                       int
}

func medianOf(cells []cell) (median, string) {
	var ok []cell
	for _, c := range cells {
		if c.setupErr != "" {
			return median{}, c.setupErr
		}
		ok = append(ok, c)
	}
	m := median{n: len(ok), calls: map[string]float64{}}
	if len(ok) == 0 {
		return m, "no measurement"
	}
	mid := func(f func(cell) float64) float64 {
		v := make([]float64, len(ok))
		for i, c := range ok {
			v[i] = f(c)
		}
		sort.Float64s(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	m.perSec = mid(func(c cell) float64 { return c.perSec })
	m.p50 = time.Duration(mid(func(c cell) float64 { return float64(c.p50) }))
	m.p99 = time.Duration(mid(func(c cell) float64 { return float64(c.p99) }))
	m.rt = mid(func(c cell) float64 { return float64(c.reads) / float64(max(c.decisions, 1)) })
	m.scripts = mid(func(c cell) float64 { return float64(c.scripts) / float64(max(c.decisions, 1)) })
	m.cmds = mid(func(c cell) float64 { return float64(c.commands) / float64(max(c.decisions, 1)) })
	m.hasSwaps = ok[0].hasSwaps
	if m.hasSwaps {
		m.batch = mid(func(c cell) float64 { return float64(c.decisions) / float64(max(c.swaps, 1)) })
		m.conflictsPerSwap = mid(func(c cell) float64 { return float64(c.conflicts) / float64(max(c.swaps, 1)) })
	}
	names := map[string]bool{}
	for _, c := range ok {
		m.denied += c.denied
		m.errs += c.errs
		if m.firstErr == "" {
			m.firstErr = c.firstErr
		}
		if c.warmNote != "" {
			m.warmNotes = append(m.warmNotes, c.warmNote)
		}
		for k := range c.calls {
			names[k] = true
		}
	}
	for k := range names {
		m.calls[k] = mid(func(c cell) float64 { return float64(c.calls[k]) / float64(max(c.decisions, 1)) })
	}
	return m, ""
}

func (c config) title(wl string) string {
	if wl == "hot" {
		return "one hot key"
	}
	return fmt.Sprintf("%s keys in turn", thousands(c.keys))
}

func (c config) short(wl string) string {
	if wl == "hot" {
		return "hot key"
	}
	if c.keys%1000 == 0 {
		return fmt.Sprintf("%dk keys", c.keys/1000)
	}
	return fmt.Sprintf("%d keys", c.keys)
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func report(w io.Writer, c config, libs []bench.RedisLibrary, results map[cellKey][]cell, acc []accuracyRow, version string, began time.Time, took time.Duration, load string) {
	fmt.Fprintf(w, "# Redis-backed limiters, side by side\n\n")
	fmt.Fprintf(w, "- Date: %s (the run took %s)\n", began.UTC().Format("2006-01-02 15:04 UTC"), took.Round(time.Second))
	fmt.Fprintf(w, "- Machine: %s, %d CPUs (GOMAXPROCS %d), %s/%s\n", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "- Load average (1, 5, 15 min): %s; anything else running on the machine shares its CPUs with the client and the server\n", load)
	fmt.Fprintf(w, "- Go: %s; redis-server %s on loopback, started by the program (no persistence), shared by client and server on the same CPUs\n", runtime.Version(), version)
	fmt.Fprintf(w, "- Sluice: %s\n", sluiceRevision())
	fmt.Fprintf(w, "- Command (in bench/): `go run ./cmd/redisbench %s`\n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(w, "- Each cell: a closed loop of N callers for %s, the median of %d rounds; libraries interleaved within each round; a fresh limiter over an emptied server per library and workload, warmed first (on many keys: one pass over every key)\n", c.duration, c.rounds)
	fmt.Fprintf(w, "- Sluice: redis.Open with Timeout %s, engine options at their defaults", c.timeout)
	if c.cacheSize != 0 {
		fmt.Fprintf(w, " but SwapCacheSize %d", c.cacheSize)
	}
	fmt.Fprintf(w, ", its client as redis.Open makes it (pool of %d); peers: a go-redis client with its defaults (pool of 10 per CPU)\n\n", redis.DefaultPoolSize)
	fmt.Fprintf(w, "Refused by the module proxy (not measured):\n\n")
	for _, p := range bench.RefusedRedisPeers {
		fmt.Fprintf(w, "- %s: %s\n", p.Module, p.Answer)
	}
	fmt.Fprintf(w, `
Columns: **RT/dec** is round trips per decision as the server saw them (its
client socket reads, total_reads_processed, less the INFO calls that read the
counters); **scripts/dec** the EVAL/EVALSHA calls per decision; **cmds/dec**
every command the server ran per decision, those a script calls included
(INFO commandstats counts them too); **dec/swap** (Sluice) the decisions per
compare-and-swap its engine sent: the coalescing batch; **confl/swap** the
share of swaps that found another record than expected. Latencies are per
decision, from the caller's side.

`)
	// The headline: decisions/s everywhere.
	fmt.Fprintf(w, "## Decisions per second\n\n")
	var hdr, sep strings.Builder
	hdr.WriteString("| library |")
	sep.WriteString("| --- |")
	for _, wl := range c.workloads {
		for _, n := range c.callers {
			fmt.Fprintf(&hdr, " %s ×%d |", c.short(wl), n)
			sep.WriteString(" ---: |")
		}
	}
	fmt.Fprintf(w, "%s\n%s\n", hdr.String(), sep.String())
	for _, lib := range libs {
		fmt.Fprintf(w, "| %s |", lib.Name)
		for _, wl := range c.workloads {
			for _, n := range c.callers {
				m, bad := medianOf(results[cellKey{wl, n, lib.Name}])
				if bad != "" {
					fmt.Fprintf(w, " failed |")
					continue
				}
				fmt.Fprintf(w, " %s |", rate(m.perSec))
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	var notes []string
	for _, wl := range c.workloads {
		for _, n := range c.callers {
			fmt.Fprintf(w, "## %s, %d caller%s\n\n", capitalize(c.title(wl)), n, plural(n))
			fmt.Fprintf(w, "| library | decisions/s | p50 | p99 | RT/dec | scripts/dec | cmds/dec | dec/swap | confl/swap | denied | errors |\n")
			fmt.Fprintf(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
			for _, lib := range libs {
				m, bad := medianOf(results[cellKey{wl, n, lib.Name}])
				if bad != "" {
					fmt.Fprintf(w, "| %s | failed | | | | | | | | | |\n", lib.Name)
					notes = append(notes, fmt.Sprintf("%s, %s ×%d: %s", lib.Name, c.short(wl), n, bad))
					continue
				}
				batch, confl := "", ""
				if m.hasSwaps {
					batch, confl = fmt.Sprintf("%.2f", m.batch), fmt.Sprintf("%.3f", m.conflictsPerSwap)
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | %.3f | %.3f | %.2f | %s | %s | %d | %d |\n",
					lib.Name, rate(m.perSec), dur(m.p50), dur(m.p99), m.rt, m.scripts, m.cmds, batch, confl, m.denied, m.errs)
				for _, wn := range m.warmNotes {
					notes = append(notes, fmt.Sprintf("%s, %s: %s", lib.Name, c.short(wl), wn))
				}
				if m.errs > 0 {
					notes = append(notes, fmt.Sprintf("%s, %s ×%d: %d errors over the rounds, the first: %s", lib.Name, c.short(wl), n, m.errs, m.firstErr))
				}
			}
			fmt.Fprintln(w)
		}
	}
	// The commands each library sends, once: the hot key at the most callers
	// and 100,000 keys at one.
	fmt.Fprintf(w, "## Commands per decision, by command\n\n")
	fmt.Fprintf(w, "Medians per decision at 1 caller (scripts' own calls included).\n\n")
	for _, wl := range c.workloads {
		fmt.Fprintf(w, "- %s:\n", capitalize(c.title(wl)))
		for _, lib := range libs {
			m, bad := medianOf(results[cellKey{wl, c.callers[0], lib.Name}])
			if bad != "" {
				continue
			}
			var parts []string
			names := make([]string, 0, len(m.calls))
			for k := range m.calls {
				names = append(names, k)
			}
			slices.Sort(names)
			for _, k := range names {
				if m.calls[k] >= 0.0005 {
					parts = append(parts, fmt.Sprintf("%s %.3f", k, m.calls[k]))
				}
			}
			fmt.Fprintf(w, "  - %s: %s\n", lib.Name, strings.Join(parts, ", "))
		}
	}
	fmt.Fprintln(w)
	if len(acc) > 0 {
		fmt.Fprintf(w, "## Accuracy across processes\n\n")
		fmt.Fprintf(w, "%d processes × %d goroutines × %d calls (%d in all) on one key, limit %d per 1000 hours (a bucket refills one unit an hour: a trial of seconds may admit exactly the limit), all started together on one server emptied first. Sluice runs each of its algorithms.\n\n",
			c.accProcs, c.accGoroutines, c.accTries, c.accProcs*c.accGoroutines*c.accTries, c.accLimit)
		fmt.Fprintf(w, "| library | algorithm | admitted | limit | over-admitted | denied | errors | trial |\n")
		fmt.Fprintf(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, a := range acc {
			over := int64(a.admitted) - c.accLimit
			fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %d | %d | %s |\n", a.lib.Name, a.lib.Algorithm, a.admitted, c.accLimit, max(over, 0), a.denied, a.errs, a.elapsed.Round(time.Millisecond))
			if a.firstErr != "" {
				notes = append(notes, fmt.Sprintf("accuracy, %s: %d errors, the first: %s", a.lib.Name, a.errs, a.firstErr))
			}
		}
		fmt.Fprintln(w)
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "## Errors\n\n")
		for _, n := range notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
		fmt.Fprintln(w)
	}
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func rate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func dur(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	case d >= time.Microsecond:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	}
	return fmt.Sprintf("%dns", d)
}

// sluiceRevision names the commit of the working tree the program runs in,
// and whether files in it had changed since, as far as git can tell.
func sluiceRevision() string {
	rev, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "revision unknown (not run in its git work tree)"
	}
	s := "commit " + strings.TrimSpace(string(rev))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		s += ", with changes not yet committed in the work tree"
	}
	return s
}

// loadAverage returns the machine's load averages from /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown CPU"
}
