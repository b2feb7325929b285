// Command rlsbench measures `sluice rls`, Envoy's external rate-limit
// service, as Envoy sees it: decisions per second and the p50 and p99 of a
// ShouldRateLimit call, made through go-control-plane's generated client
// over loopback gRPC by 1, 16 and 64 concurrent callers, on the memory
// store, on Pebble and on Redis, and compares it on Redis with
// envoyproxy/ratelimit, the protocol's reference service, on the same
// redis-server.
//
// It builds the sluice binary and writes one directory of
// envoyproxy/ratelimit configuration that every server reads: domain bench
// (a per-user limit nested under a tenant, and the tenant's own) and
// domain fleet (user 100/s per value, hot 500/s, burst 100/min). For each
// store it starts one `sluice rls` process. When a store is Redis, or the
// peer envoy is asked for, it starts its own redis-server on a free
// loopback port with no persistence; for envoy it builds
// envoyproxy/ratelimit (go install, into a temporary directory) and starts
// it on that Redis, configured by environment.
//
// The first table: each call is one request of two descriptors, (tenant,
// user) and (tenant), decided as one; users are taken in turn from -keys,
// and the limits are high enough that every call is allowed, so the
// figures are those of the decision path, not of refusals.
//
// The comparison, sluice on Redis against envoy: workload hot (every call
// the one hot descriptor, mostly over its limit) and users10k (10,000
// users in turn, every call allowed), and burst1000 (a fresh burst value,
// exactly 1,000 calls from 64 callers at once: an exact limiter allows
// 100). Redis's own counters (INFO commandstats and total_reads_processed)
// are read before and after each measurement, giving the commands, scripts
// and round trips per decision; Redis is flushed before each.
//
// Stores are interleaved within a round and rounds repeated (-rounds);
// the tables give each figure's median over the rounds. The load
// generator runs on the same machine as the servers. Run it from bench/:
//
//	go run ./cmd/rlsbench -out out/rls.md
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/bench"
	"github.com/sluice-go/sluice/bench/internal/atexit"
	"github.com/sluice-go/sluice/bench/internal/rlsproc"
)

const benchYAML = `domain: bench
descriptors:
  - key: tenant
    rate_limit:
      unit: day
      requests_per_unit: 1000000000
    descriptors:
      - key: user
        rate_limit:
          unit: day
          requests_per_unit: 1000000000
`

const fleetYAML = `domain: fleet
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 100
  - key: hot
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: burst
    rate_limit:
      unit: minute
      requests_per_unit: 100
`

// readyProbe is the call that tells a server is ready: the fleet domain's
// burst limit in force.
var readyProbe = rlsproc.Probe{Domain: "fleet", Key: "burst", Value: "ready"}

// The stores: sluice's three, and the peer.
const (
	memoryStore = "memory"
	pebbleStore = "pebble"
	redisStore  = "redis"
	envoyStore  = "envoy"
)

// label is how the tables name a store.
func label(s string) string {
	switch s {
	case redisStore:
		return "sluice rls, Redis"
	case envoyStore:
		return "envoyproxy/ratelimit, Redis"
	}
	return s
}

func onRedis(s string) bool { return s == redisStore || s == envoyStore }

// options are the flags.
type options struct {
	out        string
	duration   time.Duration
	rounds     int
	keys       int
	users      int
	callers    []int
	stores     []string
	burstReps  int
	burstCalls int
	burstConc  int
}

func main() {
	var o options
	haveRedis := false
	if _, err := exec.LookPath("redis-server"); err == nil {
		haveRedis = true
	}
	defStores := "memory,pebble"
	if haveRedis {
		defStores += ",redis,envoy"
	}
	flag.StringVar(&o.out, "out", "", "write the markdown report to this `file` (and stdout)")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "how long each measurement runs")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; the report gives medians")
	flag.IntVar(&o.keys, "keys", 100000, "distinct users of the first table")
	flag.IntVar(&o.users, "users", 10000, "distinct users of the users10k workload")
	callersFlag := flag.String("callers", "1,16,64", "concurrent callers, comma-separated")
	storesFlag := flag.String("stores", defStores, "stores, comma-separated: memory, pebble, redis (sluice rls on Redis), envoy (envoyproxy/ratelimit on Redis); redis and envoy need redis-server on PATH")
	flag.IntVar(&o.burstReps, "burst-reps", 5, "repetitions of burst1000")
	flag.IntVar(&o.burstCalls, "burst-calls", 1000, "calls of one burst")
	flag.IntVar(&o.burstConc, "burst-callers", 64, "concurrent callers of one burst")
	flag.Parse()
	for _, s := range strings.Split(*callersFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fatalf("-callers: %q", s)
		}
		o.callers = append(o.callers, n)
	}
	for _, s := range strings.Split(*storesFlag, ",") {
		s = strings.TrimSpace(s)
		switch s {
		case memoryStore, pebbleStore, redisStore, envoyStore:
		default:
			fatalf("-stores: unknown store %q (memory, pebble, redis or envoy)", s)
		}
		if slices.Contains(o.stores, s) {
			fatalf("-stores: %s twice", s)
		}
		if onRedis(s) && !haveRedis {
			fatalf("-stores: %s needs redis-server on PATH (apt-get install -y redis-server)", s)
		}
		o.stores = append(o.stores, s)
	}
	if o.rounds < 1 || o.keys < 1 || o.users < 1 || o.burstReps < 0 || o.burstCalls < 1 || o.burstConc < 1 {
		fatalf("-rounds, -keys, -users, -burst-calls and -burst-callers must be positive")
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	go func() {
		<-sig
		fatalf("interrupted")
	}()

	r := runAll(o)
	var b strings.Builder
	report(&b, o, r)
	fmt.Print(b.String())
	if o.out != "" {
		os.MkdirAll(filepath.Dir(o.out), 0o755)
		if err := os.WriteFile(o.out, []byte(b.String()), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
	atexit.Run()
}

// cellKey names one measured cell.
type cellKey struct {
	workload string
	callers  int
	store    string
}

// burstRun is one repetition of burst1000 on one server.
type burstRun struct {
	ok, over, errs int64
	firstErr       error
}

// results are everything measured.
type results struct {
	began, ended time.Time
	cells        map[cellKey][]result
	bursts       map[string][]burstRun
	peers        []string // the stores on Redis, in order
	redisVersion string
}

// comparisonWorkloads are the workloads of the comparison, in order.
var comparisonWorkloads = []string{"hot", "users10k"}

func runAll(o options) *results {
	res := &results{began: time.Now(), cells: map[cellKey][]result{}, bursts: map[string][]burstRun{}}
	for _, s := range o.stores {
		if onRedis(s) {
			res.peers = append(res.peers, s)
		}
	}
	work, err := os.MkdirTemp("", "rlsbench")
	if err != nil {
		fatalf("%v", err)
	}
	atexit.Register(func() { os.RemoveAll(work) })

	// Build sluice, and envoyproxy/ratelimit alongside.
	envoyBin := make(chan error, 1)
	envoyPath := ""
	if slices.Contains(o.stores, envoyStore) {
		go func() {
			t0 := time.Now()
			p, err := rlsproc.BuildEnvoy(filepath.Join(work, "envoy"))
			envoyPath = p
			if err == nil {
				fmt.Fprintf(os.Stderr, "built envoyproxy/ratelimit %s in %.0fs\n", rlsproc.EnvoyVersion, time.Since(t0).Seconds())
			}
			envoyBin <- err
		}()
	} else {
		envoyBin <- nil
	}
	bin := filepath.Join(work, "sluice")
	build := exec.Command("go", "build", "-C", "..", "-o", bin, "./cmd/sluice")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fatalf("building sluice: %v", err)
	}
	if err := <-envoyBin; err != nil {
		fatalf("building envoyproxy/ratelimit: %v", err)
	}

	// One configuration directory for every server: envoyproxy/ratelimit
	// reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml.
	runtimeRoot := filepath.Join(work, "runtime")
	cfgDir := filepath.Join(runtimeRoot, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		fatalf("%v", err)
	}
	for name, text := range map[string]string{"bench.yaml": benchYAML, "fleet.yaml": fleetYAML} {
		if err := os.WriteFile(filepath.Join(cfgDir, name), []byte(text), 0o644); err != nil {
			fatalf("%v", err)
		}
	}

	var rds *rlsproc.Redis
	if len(res.peers) > 0 {
		dir := filepath.Join(work, "redis")
		os.Mkdir(dir, 0o755)
		rds, err = rlsproc.StartRedis(dir)
		if err != nil {
			fatalf("starting redis-server: %v", err)
		}
		atexit.Register(rds.Stop)
		res.redisVersion = rlsproc.Command("redis-server", "--version")
		fmt.Fprintf(os.Stderr, "redis-server on %s\n", rds.Addr)
	}

	procs := map[string]*rlsproc.Server{}
	for _, s := range o.stores {
		var p *rlsproc.Server
		var err error
		switch s {
		case envoyStore:
			p, err = rlsproc.StartEnvoy(envoyPath, rds.Addr, runtimeRoot, filepath.Join(work, "envoy.log"), readyProbe)
		default:
			args := []string{"rls", "--config", cfgDir, "--grpc", "127.0.0.1:0"}
			switch s {
			case pebbleStore:
				args = append(args, "--backend", s, "--dir", filepath.Join(work, s))
			case redisStore:
				args = append(args, "--backend", "redis", "--redis-addr", rds.Addr)
			}
			p, err = rlsproc.StartSluice(s, bin, args, nil)
			if err == nil {
				if err = p.Ready(30*time.Second, readyProbe); err != nil {
					p.Stop()
				}
			}
		}
		if err != nil {
			fatalf("starting %s: %v", s, err)
		}
		atexit.Register(p.Stop)
		procs[s] = p
	}

	var next atomic.Uint64
	measure := func(s string, n int, d time.Duration, limit int64, req requestFunc, alignSecond bool) result {
		var before bench.ServerCounters
		if onRedis(s) {
			if err := rds.Flush(); err != nil {
				fatalf("%v", err)
			}
			if before, err = rds.Counters(); err != nil {
				fatalf("reading Redis counters: %v", err)
			}
		}
		if alignSecond {
			// The fleet's per-second windows: start at a fresh one, so that
			// no server begins with a window the last measurement spent
			// (Redis was flushed, but a server may remember a denial).
			now := time.Now()
			time.Sleep(now.Truncate(time.Second).Add(time.Second + 5*time.Millisecond).Sub(now))
		}
		r := run(procs[s].Client, n, d, limit, req, &next)
		if onRedis(s) {
			after, err := rds.Counters()
			if err != nil {
				fatalf("reading Redis counters: %v", err)
			}
			w := after.Delta(before)
			r.redis = &w
		}
		return r
	}

	// Warm up each server (connections, pools, scripts loaded), uncounted.
	maxCallers := slices.Max(o.callers)
	for _, s := range o.stores {
		measure(s, maxCallers, time.Second, 0, tenantUser(o.keys), false)
		if onRedis(s) {
			measure(s, maxCallers, 500*time.Millisecond, 0, fleetUsers(o.users), false)
		}
	}

	record := func(k cellKey, r result, round int) {
		res.cells[k] = append(res.cells[k], r)
		extra := ""
		if r.redis != nil && r.calls > 0 {
			extra = fmt.Sprintf(" redis %.2f cmds/decision", float64(r.redis.Commands)/float64(r.calls))
		}
		if r.errs > 0 {
			extra += fmt.Sprintf(" %d errors (%v)", r.errs, r.firstErr)
		}
		fmt.Fprintf(os.Stderr, "round %d %s %s %d callers: %.0f/s p50 %.0fµs p99 %.0fµs ok %d over %d%s\n",
			round+1, k.workload, k.store, k.callers, r.rate, r.p50, r.p99, r.ok, r.over, extra)
	}

	// The first table: every store, the tenant and user workload.
	for round := 0; round < o.rounds; round++ {
		for _, c := range o.callers {
			for i := range o.stores {
				s := o.stores[(i+round)%len(o.stores)]
				r := measure(s, c, o.duration, 0, tenantUser(o.keys), false)
				if r.over > 0 {
					fatalf("%s refused %d calls of the tenant and user workload, which all fit the limits", s, r.over)
				}
				record(cellKey{"tenant+user", c, s}, r, round)
			}
		}
	}

	// The comparison on Redis.
	if len(res.peers) > 0 {
		reqs := map[string]requestFunc{"hot": hotKey, "users10k": fleetUsers(o.users)}
		for round := 0; round < o.rounds; round++ {
			for _, w := range comparisonWorkloads {
				for _, c := range o.callers {
					for i := range res.peers {
						s := res.peers[(i+round)%len(res.peers)]
						record(cellKey{w, c, s}, measure(s, c, o.duration, 0, reqs[w], true), round)
					}
				}
			}
		}
		for rep := 0; rep < o.burstReps; rep++ {
			for i := range res.peers {
				s := res.peers[(i+rep)%len(res.peers)]
				b := burst(s, o, rep, func(v string) result {
					return measure(s, o.burstConc, time.Minute, int64(o.burstCalls), burstKey(v), false)
				})
				res.bursts[s] = append(res.bursts[s], b)
				fmt.Fprintf(os.Stderr, "burst %d %s: ok %d over %d errors %d\n", rep+1, s, b.ok, b.over, b.errs)
			}
		}
	}
	res.ended = time.Now()
	return res
}

// burst runs one repetition of burst1000 on a fresh descriptor value,
// within one minute window of the burst limit (windows are aligned to the
// minute): it starts no later than 50s into a minute and is run again if
// it still crossed into the next one.
func burst(s string, o options, rep int, do func(v string) result) burstRun {
	for try := 0; ; try++ {
		now := time.Now()
		if now.Second() >= 50 {
			time.Sleep(now.Truncate(time.Minute).Add(time.Minute + 100*time.Millisecond).Sub(now))
		}
		t0 := time.Now()
		r := do(fmt.Sprintf("%s-%d-%d-%d", s, rep, try, t0.UnixNano()))
		if t0.Truncate(time.Minute).Equal(time.Now().Truncate(time.Minute)) || try == 2 {
			return burstRun{ok: r.ok, over: r.over, errs: r.errs, firstErr: r.firstErr}
		}
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rlsbench: "+format+"\n", args...)
	atexit.Run()
	os.Exit(1)
}
