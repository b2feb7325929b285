// Command attack drives the floods of issue "Hostile edges" against the
// real `sluice` binary, with bounded load, all on loopback, and against the
// peer a user would otherwise run where one exists, printing for each flood
// the server's resident memory (VmRSS and VmHWM from /proc, sampled) and
// the p50 and p99 of a normal caller making one ordinary request every
// 10 ms beside it, on a connection of its own (open loop: a stalled server
// shows in the latencies).
//
//   - descriptors (`sluice rls`): one ShouldRateLimit call of 80,000 and one
//     of 100,000 descriptors, each with a 1 s client deadline: the call's
//     answer and time, the server's CPU seconds (utime+stime from
//     /proc/PID/stat) until the answer and after it, until the server is
//     idle or -cpu-wait. Against envoyproxy/ratelimit on redis-server
//     (their CPU summed).
//   - values (`sluice rls`): 200 calls, 4 at a time, each of one descriptor
//     with a distinct value of 1 MB, then of 4 KiB, under a per-user limit a
//     day long: each call's answer, RSS before, peak, after and -settle
//     later. envoyproxy/ratelimit's figures are its process's and its
//     redis-server's summed, since its keys live in Redis.
//   - slow (`sluice serve`): 64 connections each sending a POST's headers
//     announcing a 1 MB body, then one byte a second; idle: 500
//     connections each making one request and then staying idle
//     (keep-alive). Until every connection is cut or -hold: how many the
//     proxy cut and after how long, the upstream's open connections and
//     requests in progress at their peak. Against nginx (Debian's) as a
//     plain reverse proxy.
//
// Each flood starts a fresh server process, measures the normal caller
// alone for -baseline, then floods, and kills the server after. It runs the
// binary given by -sluice with its defaults and the flags of -rls-args and
// -serve-args (so that the same run measures a binary before and after a
// change; a flag the binary does not know is reported as a failed start).
// Run it from bench/:
//
//	go run ./cmd/attack -sluice ../bin/sluice -out out/attack.md
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice/bench/internal/atexit"
	"github.com/sluice-go/sluice/bench/internal/rlsproc"
	"github.com/sluice-go/sluice/internal/loadgen/serveproc"
)

// options are the flags.
type options struct {
	sluice, out             string
	rlsArgs, serveArgs      []string
	floods                  []string
	peers                   bool
	descriptors, valueSizes []int
	valueRequests           int
	floodDeadline, cpuWait  time.Duration
	baseline, settle, hold  time.Duration
	slowConns, idleConns    int
	nginxDirectives         string
}

var allFloods = []string{"descriptors", "values", "slow", "idle"}

func ints(name, s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fatalf("-%s: %q is not a positive number", name, f)
		}
		out = append(out, n)
	}
	return out
}

func main() {
	var o options
	flag.StringVar(&o.sluice, "sluice", "", "the sluice `binary` to attack (default: build cmd/sluice into a temporary directory)")
	flag.StringVar(&o.out, "out", "", "write the markdown report to this `file` (and stdout)")
	rlsArgs := flag.String("rls-args", "", "extra `flags` for sluice rls, space-separated")
	serveArgs := flag.String("serve-args", "", "extra `flags` for sluice serve, space-separated")
	floods := flag.String("floods", strings.Join(allFloods, ","), "the floods to run, comma-separated")
	flag.BoolVar(&o.peers, "peers", true, "attack envoyproxy/ratelimit (built with go install, on redis-server) and nginx too")
	desc := flag.String("descriptors", "80000,100000", "descriptors in the one call of each descriptors flood")
	sizes := flag.String("value-sizes", "1048576,4096", "the descriptor value's size in bytes, one values flood each")
	flag.IntVar(&o.valueRequests, "value-requests", 200, "calls of a values flood, each with a distinct value")
	flag.DurationVar(&o.floodDeadline, "deadline", time.Second, "the client deadline of a descriptors flood's call")
	flag.DurationVar(&o.cpuWait, "cpu-wait", 40*time.Second, "how long after the call's answer to wait for the server to go idle")
	flag.DurationVar(&o.baseline, "baseline", 3*time.Second, "the normal caller alone before each flood")
	flag.DurationVar(&o.settle, "settle", 5*time.Second, "after a values flood, how long before RSS is read again")
	flag.DurationVar(&o.hold, "hold", 30*time.Second, "how long a slow or idle flood keeps its connections at most")
	flag.IntVar(&o.slowConns, "slow-conns", 64, "connections of the slow-body flood")
	flag.IntVar(&o.idleConns, "idle-conns", 500, "connections of the idle keep-alive flood")
	flag.StringVar(&o.nginxDirectives, "nginx-directives", "client_body_timeout 10s; keepalive_timeout 10s; send_timeout 10s;",
		"directives added to nginx's http block (its defaults are 60s, 75s, 60s; shortened to keep the run bounded)")
	flag.Parse()
	o.rlsArgs, o.serveArgs = strings.Fields(*rlsArgs), strings.Fields(*serveArgs)
	for _, f := range strings.Split(*floods, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allFloods, f) {
			fatalf("-floods: unknown flood %q (%s)", f, strings.Join(allFloods, ", "))
		}
		o.floods = append(o.floods, f)
	}
	o.descriptors, o.valueSizes = ints("descriptors", *desc), ints("value-sizes", *sizes)
	if o.valueRequests < 1 || o.slowConns < 1 || o.idleConns < 1 || o.hold <= 0 || o.cpuWait <= 0 || o.floodDeadline <= 0 {
		fatalf("-value-requests, -slow-conns, -idle-conns, -hold, -cpu-wait and -deadline must be positive")
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	go func() {
		<-sig
		fatalf("interrupted")
	}()

	r := run(&o)
	var b strings.Builder
	report(&b, &o, r)
	fmt.Print(b.String())
	if o.out != "" {
		os.MkdirAll(filepath.Dir(o.out), 0o755)
		if err := os.WriteFile(o.out, []byte(b.String()), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
	atexit.Run()
	if len(r.failures) > 0 {
		os.Exit(1)
	}
}

// results are everything measured.
type results struct {
	began, ended           time.Time
	loadBefore, loadAfter  string
	bin, version           string
	redisVersion, nginxVer string
	descriptors            []descriptorsRow
	values                 []valuesRow
	serve                  []floodRow
	failures               []string // floods that could not be run
}

func (r *results) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintln(os.Stderr, "attack: "+msg)
	r.failures = append(r.failures, msg)
}

func loadavg() string {
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

func run(o *options) *results {
	res := &results{began: time.Now(), loadBefore: loadavg()}
	work, err := os.MkdirTemp("", "sluice-attack")
	if err != nil {
		fatalf("%v", err)
	}
	atexit.Register(func() { os.RemoveAll(work) })
	ctx := context.Background()
	if o.sluice == "" {
		fmt.Fprintln(os.Stderr, "attack: building cmd/sluice")
	}
	res.bin, err = serveproc.Binary(ctx, o.sluice, "..", work)
	if err != nil {
		fatalf("%v", err)
	}
	res.version = rlsproc.Command(res.bin, "version")
	has := func(f string) bool { return slices.Contains(o.floods, f) }
	wantRLS := has("descriptors") || has("values")

	// envoyproxy/ratelimit and its redis-server, built alongside.
	var envoy *rlsTarget
	runtimeRoot := filepath.Join(work, "runtime")
	cfgDir, err := writeRLSConfig(runtimeRoot)
	if err != nil {
		fatalf("%v", err)
	}
	if wantRLS && o.peers {
		if _, err := exec.LookPath("redis-server"); err != nil {
			res.fail("envoyproxy/ratelimit SKIPPED: it needs redis-server on PATH (apt-get install -y redis-server)")
		} else {
			t0 := time.Now()
			fmt.Fprintf(os.Stderr, "attack: building envoyproxy/ratelimit %s\n", rlsproc.EnvoyVersion)
			envoyBin, err := rlsproc.BuildEnvoy(filepath.Join(work, "envoy"))
			if err != nil {
				res.fail("envoyproxy/ratelimit SKIPPED: %v", err)
			} else {
				fmt.Fprintf(os.Stderr, "attack: built envoyproxy/ratelimit in %.0fs\n", time.Since(t0).Seconds())
				res.redisVersion = rlsproc.Command("redis-server", "--version")
				t := envoyRLS(envoyBin, runtimeRoot, work)
				envoy = &t
			}
		}
	}
	targets := []rlsTarget{sluiceRLS(res.bin, cfgDir, work, o.rlsArgs)}
	if envoy != nil {
		targets = append(targets, *envoy)
	}

	if has("descriptors") {
		for _, n := range o.descriptors {
			for _, t := range targets {
				fmt.Fprintf(os.Stderr, "attack: descriptors: %s, one call of %d descriptors\n", t.name, n)
				row := descriptorFlood(t, n, o)
				res.descriptors = append(res.descriptors, row)
				fmt.Fprintf(os.Stderr, "attack:   answer %s in %s; CPU %.1f s until it, %.1f s after (busy %v after %.0f s); normal p99 %s → %s %s\n",
					row.answer, ms(row.took), row.cpuDuring, row.cpuAfter, row.busy, row.busyAfter.Seconds(), ms(row.before.p99), ms(row.dur.p99), row.err)
				if row.err != "" {
					res.fail("descriptors %d, %s: %s", n, t.name, row.err)
				}
			}
		}
	}
	if has("values") {
		for _, size := range o.valueSizes {
			for _, t := range targets {
				fmt.Fprintf(os.Stderr, "attack: values: %s, %d calls with distinct %d-byte values\n", t.name, o.valueRequests, size)
				row := valueFlood(t, size, o)
				res.values = append(res.values, row)
				fmt.Fprintf(os.Stderr, "attack:   RSS %s → peak %s → %s → %s; answers %v; normal p99 %s → %s %s\n",
					mb(row.rssBefore), mb(row.peak), mb(row.rssAfter), mb(row.rssLater), row.answers, ms(row.before.p99), ms(row.dur.p99), row.err)
				if row.err != "" {
					res.fail("values %d, %s: %s", size, t.name, row.err)
				}
			}
		}
	}
	if has("slow") || has("idle") {
		up, err := startUpstream()
		if err != nil {
			fatalf("upstream: %v", err)
		}
		defer up.srv.Close()
		type starter struct {
			name  string
			start func(dir string) (*proxy, error)
		}
		starters := []starter{{"sluice serve", func(dir string) (*proxy, error) {
			return startSluiceServe(res.bin, dir, up.url, o.serveArgs)
		}}}
		if o.peers {
			if bin := findNginx(); bin == "" {
				res.fail("nginx SKIPPED: not on PATH nor %s (apt-get install -y nginx)", debianNginx)
			} else {
				res.nginxVer = strings.TrimPrefix(rlsproc.Command(bin, "-v"), "nginx version: ")
				if out, err := exec.Command(bin, "-v").CombinedOutput(); err == nil {
					res.nginxVer = strings.TrimPrefix(strings.TrimSpace(string(out)), "nginx version: ")
				}
				starters = append(starters, starter{"nginx", func(dir string) (*proxy, error) {
					return startNginx(bin, dir, up.url, o.nginxDirectives)
				}})
			}
		}
		kinds := []struct {
			name string
			n    int
			conn func(string, int, <-chan struct{}, *connOutcome, *sync.WaitGroup)
		}{{"slow", o.slowConns, slowBodyConn}, {"idle", o.idleConns, idleConn}}
		k := 0
		for _, kind := range kinds {
			if !has(kind.name) {
				continue
			}
			for _, s := range starters {
				k++
				fmt.Fprintf(os.Stderr, "attack: %s: %s, %d connections\n", kind.name, s.name, kind.n)
				p, err := s.start(filepath.Join(work, fmt.Sprintf("proxy-%d", k)))
				if err != nil {
					res.fail("%s flood, starting %s: %v", kind.name, s.name, err)
					continue
				}
				row := flood(p, up, kind.name, kind.n, o, kind.conn)
				if err := p.stop(); err != nil && row.err == "" {
					row.err = err.Error()
				}
				res.serve = append(res.serve, row)
				cut, held, failed := row.summary()
				fmt.Fprintf(os.Stderr, "attack:   cut %s; held %s; failed %s; upstream conns %d, requests %d; RSS %s → %s; normal p99 %s → %s %s\n",
					cut, held, failed, row.upOpen, row.upServing, mb(row.rssBefore), mb(row.peak), ms(row.before.p99), ms(row.dur.p99), row.err)
				if row.err != "" {
					res.fail("%s flood, %s: %s", kind.name, s.name, row.err)
				}
			}
		}
	}
	res.ended, res.loadAfter = time.Now(), loadavg()
	return res
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "attack: "+format+"\n", args...)
	atexit.Run()
	os.Exit(2)
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func report(b *strings.Builder, o *options, r *results) {
	fmt.Fprintf(b, "# Attack floods: `sluice` beside its peers\n\n")
	fmt.Fprintf(b, "- Run: %s, %.0f s; load average (1, 5, 15 min) %s before, %s after.\n",
		r.began.UTC().Format("2006-01-02 15:04 UTC"), r.ended.Sub(r.began).Seconds(), r.loadBefore, r.loadAfter)
	fmt.Fprintf(b, "- Machine: %d vCPU (%s), %s/%s, %s; load generator and servers on one machine, over loopback.\n",
		runtime.NumCPU(), cpuModel(), runtime.GOOS, runtime.GOARCH, rlsproc.Command("go", "version"))
	fmt.Fprintf(b, "- Binary: `%s` (`sluice version`: %s); `sluice rls` flags added: %s; `sluice serve` flags added: %s.\n",
		r.bin, r.version, flagsOrNone(o.rlsArgs), flagsOrNone(o.serveArgs))
	if r.redisVersion != "" {
		fmt.Fprintf(b, "- Peer of `rls`: envoyproxy/ratelimit %s (`go install %s/src/service_cmd`) with `%s`, on %s; its memory and CPU are its process's and its redis-server's summed.\n",
			rlsproc.EnvoyVersion, rlsproc.EnvoyModule, strings.Join(rlsproc.EnvoySettings, " "), r.redisVersion)
	}
	if r.nginxVer != "" {
		fmt.Fprintf(b, "- Peer of `serve`: nginx %s as a plain reverse proxy (worker_processes auto, worker_connections 768 as Debian's nginx.conf, proxy_pass with its defaults: the body buffered before the upstream is called), with `%s`; its memory and CPU are the master's and the workers' summed.\n",
			r.nginxVer, o.nginxDirectives)
	}
	if m, err := serveproc.ReadMemory(os.Getpid()); err == nil {
		fmt.Fprintf(b, "- The load generator's own peak RSS: %s.\n", mb(m.HWM))
	}
	fmt.Fprintf(b, "- Normal caller: one ordinary request every 10 ms (open loop, on its own connection), %s alone before each flood (\"before\") and throughout it (\"during\"); latencies in ms, failed requests counted with their time.\n\n", o.baseline)

	if len(r.descriptors) > 0 {
		fmt.Fprintf(b, "## Many descriptors in one call (rls)\n\n")
		fmt.Fprintf(b, "One ShouldRateLimit call of N descriptors (`user` = a distinct value each), client deadline %s. CPU: the server's utime+stime until the call's answer, then after it until the server is idle (in a second, no more CPU than the normal caller alone cost it in one, measured before the flood, plus 0.05 s) or %s.\n\n", o.floodDeadline, o.cpuWait)
		fmt.Fprintf(b, "| server | descriptors | answer | time | CPU until the answer | CPU after it | idle after | normal p50 / p99 before | during | normal failures during |\n|---|---:|---|---:|---:|---:|---|---:|---:|---|\n")
		for _, d := range r.descriptors {
			if d.err != "" && d.answer == "" {
				fmt.Fprintf(b, "| %s | %d | not run (see below) | | | | | | | |\n", d.target, d.n)
				continue
			}
			idle := fmt.Sprintf("%.0f s", d.busyAfter.Seconds())
			if d.busy {
				idle = fmt.Sprintf("**still busy after %.0f s**", d.busyAfter.Seconds())
			}
			if d.err != "" {
				idle += " (" + clip(d.err, 100) + ")"
			}
			fmt.Fprintf(b, "| %s | %d | %s | %s | %.1f s | %.1f s | %s | %s | %s | %s |\n",
				d.target, d.n, d.answer, ms(d.took), d.cpuDuring, d.cpuAfter, idle, d.before.pair(), d.dur.pair(), d.dur.failures())
		}
		b.WriteString("\n")
	}
	if len(r.values) > 0 {
		fmt.Fprintf(b, "## Large descriptor values (rls)\n\n")
		fmt.Fprintf(b, "%d calls, 4 at a time, each of one descriptor `user` = a distinct value of the size given, under a limit of a day. RSS: before, peak (sampled every 100 ms, and VmHWM), after the last answer, and %s later.\n\n", o.valueRequests, o.settle)
		fmt.Fprintf(b, "| server | value | answers | time | RSS before | peak | after | %[1]s later | normal p50 / p99 before | during and %[1]s after | normal failures then |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n", o.settle)
		for _, v := range r.values {
			if v.err != "" && len(v.answers) == 0 {
				fmt.Fprintf(b, "| %s | %s | not run (see below) | | | | | | | | |\n", v.target, size(v.size))
				continue
			}
			var as []string
			for a, n := range v.answers {
				as = append(as, fmt.Sprintf("%d× %s", n, a))
			}
			slices.Sort(as)
			ans := strings.Join(as, ", ")
			if v.err != "" {
				ans += " (" + clip(v.err, 100) + ")"
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				v.target, size(v.size), ans, ms(v.took), mb(v.rssBefore), mb(v.peak), mb(v.rssAfter), mb(v.rssLater), v.before.pair(), v.dur.pair(), v.dur.failures())
		}
		b.WriteString("\n")
	}
	if len(r.serve) > 0 {
		fmt.Fprintf(b, "## Slow and idle connections (serve)\n\n")
		fmt.Fprintf(b, "slow: %d connections, each a POST's headers announcing a 1 MB body, then one byte a second. idle: %d connections, each one request answered, then idle (keep-alive). Each flood lasts until every connection is cut or %s. \"cut\": connections the proxy closed, when (from the first byte of the body, or from the answer), and the status line it sent first. Upstream: the trivial upstream's open connections and requests in progress, at their peak during the flood.\n\n", o.slowConns, o.idleConns, o.hold)
		fmt.Fprintf(b, "| proxy | settings | flood | cut by the proxy | still held | not set up | upstream conns / requests (peak) | RSS before | peak | after | normal p50 / p99 before | during | normal failures during |\n|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---|\n")
		for _, f := range r.serve {
			cut, held, failed := f.summary()
			if f.err != "" {
				held += " (" + clip(f.err, 100) + ")"
			}
			fmt.Fprintf(b, "| %s | %s | %s × %d | %s | %s | %s | %d / %d | %s | %s | %s | %s | %s | %s |\n",
				f.proxy, f.settings, f.flood, f.conns, cut, held, failed, f.upOpen, f.upServing, mb(f.rssBefore), mb(f.peak), mb(f.after), f.before.pair(), f.dur.pair(), f.dur.failures())
		}
		b.WriteString("\n")
	}
	if len(r.failures) > 0 {
		fmt.Fprintf(b, "## Not measured\n\n")
		for _, f := range r.failures {
			fmt.Fprintf(b, "- %s\n", clip(f, 1000))
		}
		b.WriteString("\n")
	}
}

func flagsOrNone(f []string) string {
	if len(f) == 0 {
		return "none"
	}
	return "`" + strings.Join(f, " ") + "`"
}

func size(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
