package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sluice-go/sluice/bench"
	"github.com/sluice-go/sluice/bench/internal/rlsproc"
)

// cell is one cell's measurements over the rounds, summarized.
type cell struct {
	n                    int
	rate, p50, p99       float64 // medians
	cmds, scripts, reads float64 // medians of the per-decision figures; -1 off Redis
	ok, over, errs       int64   // sums
	calls                int64   // sum
	work                 bench.ServerDelta
	firstErr             error
}

func summarize(rs []result) cell {
	c := cell{n: len(rs), cmds: -1, scripts: -1, reads: -1}
	var rate, p50, p99, cmds, scripts, reads []float64
	for _, r := range rs {
		rate, p50, p99 = append(rate, r.rate), append(p50, r.p50), append(p99, r.p99)
		c.ok += r.ok
		c.over += r.over
		c.errs += r.errs
		c.calls += r.calls
		if c.firstErr == nil {
			c.firstErr = r.firstErr
		}
		if r.redis != nil && r.calls > 0 {
			n := float64(r.calls)
			cmds = append(cmds, float64(r.redis.Commands)/n)
			scripts = append(scripts, float64(r.redis.Scripts)/n)
			reads = append(reads, float64(r.redis.Reads)/n)
			c.work.Add(*r.redis)
		}
	}
	c.rate, c.p50, c.p99 = median(rate), median(p50), median(p99)
	if len(cmds) > 0 {
		c.cmds, c.scripts, c.reads = median(cmds), median(scripts), median(reads)
	}
	return c
}

// perDecision formats x per decision, "—" off Redis.
func perDecision(x float64) string {
	if x < 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", x)
}

// byCommand lists w's calls per decision by command, the most first.
func byCommand(w bench.ServerDelta, decisions int64) string {
	if decisions == 0 || len(w.Calls) == 0 {
		return "—"
	}
	names := make([]string, 0, len(w.Calls))
	for k := range w.Calls {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int {
		if w.Calls[a] != w.Calls[b] {
			return int(w.Calls[b] - w.Calls[a])
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range names {
		v := float64(w.Calls[k]) / float64(decisions)
		if v < 0.005 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", strings.ToUpper(k), v))
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func report(b io.Writer, o options, r *results) {
	sum := func(w string, c int, s string) cell { return summarize(r.cells[cellKey{w, c, s}]) }
	hasRedis := len(r.peers) > 0

	fmt.Fprintf(b, "# `sluice rls`: decisions over loopback gRPC\n\n")
	fmt.Fprintf(b, "Measured %s on %s/%s, %d CPUs, %s; `go run ./cmd/rlsbench` (bench/cmd/rlsbench).\n",
		r.began.UTC().Format("2006-01-02 15:04 UTC"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	fmt.Fprintf(b, "Each call is one ShouldRateLimit request of two descriptors, (tenant, user) and (tenant), decided as one\n")
	fmt.Fprintf(b, "(engine ApplyAll), through go-control-plane's client; %d users in turn; every call allowed.\n", o.keys)
	fmt.Fprintf(b, "Closed loop of %s per cell, %d rounds interleaving the stores, medians; the load generator shares the machine.\n", o.duration, o.rounds)
	fmt.Fprintf(b, "Pebble in the default interval durability (flushed every 50ms).")
	if hasRedis {
		fmt.Fprintf(b, " Redis is one local redis-server with no persistence, flushed before each\n")
		fmt.Fprintf(b, "measurement; Redis commands per decision are from its INFO commandstats (see below).")
		if slices.Contains(o.stores, envoyStore) {
			fmt.Fprintf(b, " envoyproxy/ratelimit answers the same\n")
			fmt.Fprintf(b, "requests from the same configuration file (it increments each descriptor separately).")
		}
	}
	fmt.Fprintf(b, "\n\n")
	fmt.Fprintf(b, "| store | callers | decisions/s | p50 | p99 | errors | Redis commands/decision |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range o.stores {
		for _, c := range o.callers {
			x := sum("tenant+user", c, s)
			fmt.Fprintf(b, "| %s | %d | %.0f | %.0f µs | %.0f µs | %d | %s |\n", label(s), c, x.rate, x.p50, x.p99, x.errs, perDecision(x.cmds))
		}
	}
	if !hasRedis {
		return
	}
	withEnvoy := slices.Contains(r.peers, envoyStore) && slices.Contains(r.peers, redisStore)

	fmt.Fprintf(b, "\n## `sluice rls` and envoyproxy/ratelimit on one Redis\n\n")
	model := cpuModel()
	if model != "" {
		model = " (" + model + ")"
	}
	fmt.Fprintf(b, "- Machine: nproc %d%s, %s/%s; %s; %s.\n", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH, rlsproc.Command("go", "version"), r.redisVersion)
	fmt.Fprintf(b, "- Date: %s, the run took %s.\n", r.began.UTC().Format("2006-01-02 15:04 UTC"), r.ended.Sub(r.began).Round(time.Second))
	fmt.Fprintf(b, "- redis-server: started by the program on a loopback port (`--save '' --appendonly no`), shared by both servers; FLUSHALL before every measurement.\n")
	fmt.Fprintf(b, "- sluice: `sluice rls --config DIR --backend redis --redis-addr 127.0.0.1:PORT` (each limit fixed_window, the algorithm when the file names none).\n")
	if slices.Contains(r.peers, envoyStore) {
		fmt.Fprintf(b, "- envoyproxy/ratelimit: `%s/src/service_cmd@%s`, built by the program with `go install`; environment %s,\n",
			rlsproc.EnvoyModule, rlsproc.EnvoyVersion, "`"+strings.Join(rlsproc.EnvoySettings, "`, `")+"`")
		fmt.Fprintf(b, "  `REDIS_URL=127.0.0.1:PORT`, `RUNTIME_ROOT=DIR`, GRPC_PORT, PORT and DEBUG_PORT free ports; the rest at their defaults (REDIS_POOL_SIZE 10, no pipeline window, no local cache).\n")
	}
	fmt.Fprintf(b, "- Both read one configuration file (envoyproxy/ratelimit's format):\n\n```yaml\n%s```\n\n", fleetYAML)
	fmt.Fprintf(b, "- Workloads, one descriptor per call: **hot**, every call `hot=h` (500/s: mostly OVER_LIMIT; an exact limiter admits at most 500 per second window);\n")
	fmt.Fprintf(b, "  **users10k**, `user=N` for %d users in turn (100/s each: every call OK); **burst1000**, below.\n", o.users)
	fmt.Fprintf(b, "- Each measurement: a closed loop of %s by N callers through one gRPC connection per server, go-control-plane's client;\n", o.duration)
	fmt.Fprintf(b, "  hot and users10k start just after a whole second, at a fresh window of their per-second limits.\n")
	fmt.Fprintf(b, "  INFO commandstats and stats are read before and after it: Redis commands/decision is the sum of calls (those scripts run included,\n")
	fmt.Fprintf(b, "  INFO not) over the decisions; scripts is EVALSHA + EVAL + FCALL (and their _RO forms); round trips is total_reads_processed.\n")
	fmt.Fprintf(b, "- %d rounds, the servers interleaved within each round (the order turning); decisions/s, p50, p99 and the per-decision Redis\n", o.rounds)
	fmt.Fprintf(b, "  figures are medians over the rounds; OK, OVER_LIMIT and errors (any gRPC error, such as UNAVAILABLE or DEADLINE_EXCEEDED\n")
	fmt.Fprintf(b, "  after %s) are summed over them. The load generator shares the machine's CPUs with both servers and Redis.\n\n", callTimeout)

	fmt.Fprintf(b, "### Decisions/s, latency, Redis work\n\n")
	fmt.Fprintf(b, "| workload | callers | server | decisions/s | p50 | p99 | OK | OVER_LIMIT | errors | Redis commands/decision | scripts/decision | round trips/decision |\n")
	fmt.Fprintf(b, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, w := range comparisonWorkloads {
		for _, c := range o.callers {
			for _, s := range r.peers {
				x := sum(w, c, s)
				fmt.Fprintf(b, "| %s | %d | %s | %.0f | %.0f µs | %.0f µs | %d | %d | %d | %s | %s | %s |\n",
					w, c, label(s), x.rate, x.p50, x.p99, x.ok, x.over, x.errs, perDecision(x.cmds), perDecision(x.scripts), perDecision(x.reads))
			}
		}
	}

	fmt.Fprintf(b, "\nOn hot, `sluice rls` denies a request that the key's last-seen record already denies without a round trip\n")
	fmt.Fprintf(b, "(engine/doc.go), so it reaches Redis about once per window; envoyproxy/ratelimit sends GET, INCRBY and EXPIRE for\n")
	fmt.Fprintf(b, "every descriptor of every call (the commands by name are below).\n")

	if withEnvoy {
		fmt.Fprintf(b, "\n### sluice ÷ envoy, decisions/s\n\n")
		fmt.Fprintf(b, "| workload | callers | sluice rls, Redis | envoyproxy/ratelimit | sluice ÷ envoy |\n|---|---:|---:|---:|---:|\n")
		for _, w := range append(slices.Clone(comparisonWorkloads), "tenant+user") {
			for _, c := range o.callers {
				sl, en := sum(w, c, redisStore), sum(w, c, envoyStore)
				ratio := "—"
				if en.rate > 0 {
					ratio = fmt.Sprintf("%.2f×", sl.rate/en.rate)
				}
				fmt.Fprintf(b, "| %s | %d | %.0f | %.0f | %s |\n", w, c, sl.rate, en.rate, ratio)
			}
		}
		fmt.Fprintf(b, "\ntenant+user is the first table's workload: two descriptors per call, every call allowed, every call sharing the\n")
		fmt.Fprintf(b, "tenant descriptor. `sluice rls` decides both as one (nothing spent unless both allow); the calls queued on the\n")
		fmt.Fprintf(b, "tenant's key are decided together, one compare-and-swap over all their keys; envoyproxy/ratelimit increments\n")
		fmt.Fprintf(b, "each descriptor on its own (and has no all-or-nothing).\n")
	}

	fmt.Fprintf(b, "\n### Redis commands per decision, by command (all callers and rounds)\n\n")
	fmt.Fprintf(b, "| workload | server | calls per decision |\n|---|---|---|\n")
	for _, w := range append(slices.Clone(comparisonWorkloads), "tenant+user") {
		for _, s := range r.peers {
			var work bench.ServerDelta
			var calls int64
			for _, c := range o.callers {
				x := sum(w, c, s)
				work.Add(x.work)
				calls += x.calls
			}
			fmt.Fprintf(b, "| %s | %s | %s |\n", w, label(s), byCommand(work, calls))
		}
	}

	if o.burstReps > 0 {
		fmt.Fprintf(b, "\n### burst1000\n\n")
		fmt.Fprintf(b, "A fresh `burst` value (100 per minute) each time, exactly %d calls from %d callers released together, within one minute\n", o.burstCalls, o.burstConc)
		fmt.Fprintf(b, "window (the windows are aligned to the minute; a burst that crossed one would be run again); Redis flushed before each;\n")
		fmt.Fprintf(b, "%d repetitions per server, interleaved. An exact limiter answers OK exactly 100 times.\n\n", o.burstReps)
		fmt.Fprintf(b, "| server | OK, each repetition | OVER_LIMIT, each | errors, each | OK = 100 every time |\n|---|---|---|---|---|\n")
		for _, s := range r.peers {
			var ok, over, errs []string
			exact := "yes"
			for _, x := range r.bursts[s] {
				ok, over, errs = append(ok, fmt.Sprint(x.ok)), append(over, fmt.Sprint(x.over)), append(errs, fmt.Sprint(x.errs))
				if x.ok != 100 {
					exact = "no"
				}
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", label(s), strings.Join(ok, ", "), strings.Join(over, ", "), strings.Join(errs, ", "), exact)
		}
	}

	var errNotes []string
	for _, s := range r.peers {
		for _, w := range append(slices.Clone(comparisonWorkloads), "tenant+user") {
			for _, c := range o.callers {
				if x := sum(w, c, s); x.errs > 0 {
					errNotes = append(errNotes, fmt.Sprintf("- %s, %s, %d callers: %d errors; the first: %v", label(s), w, c, x.errs, x.firstErr))
				}
			}
		}
		for i, x := range r.bursts[s] {
			if x.errs > 0 {
				errNotes = append(errNotes, fmt.Sprintf("- %s, burst1000 repetition %d: %d errors; the first: %v", label(s), i+1, x.errs, x.firstErr))
			}
		}
	}
	if len(errNotes) > 0 {
		fmt.Fprintf(b, "\nErrors:\n\n%s\n", strings.Join(errNotes, "\n"))
	}
}
