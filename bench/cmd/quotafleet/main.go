// Command quotafleet measures a hierarchy quota (an organisation's pool
// shared by its users, each with a budget of their own) on a fleet under
// load and faults, against envoyproxy/ratelimit's nested descriptors.
//
// Sluice: 3 `sluice serve` processes built from this tree, on a 3-node
// Redis Cluster the program starts (redis-server on free loopback ports,
// no persistence), the rules one group: org-day (header:X-Org-ID, fixed
// window, calendar day) and user-day (the user within the organisation).
// The load generator stands for the authenticating proxy: it sets
// X-Org-ID and X-User-ID, and the gateways trust 127.0.0.1. An upstream
// counts what reached it per organisation and user; after the run each
// level's count is read from /v1/usage. Redis's INFO commandstats on
// every node give the scripts a call cost.
//
// The peer: envoyproxy/ratelimit (rlsproc's pseudo-version, built with go
// install into a temporary directory) on a standalone redis-server, the
// same two levels as nested descriptors (org; org+user) in one
// ShouldRateLimit call, with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT off
// (its default) and on; and `sluice rls` on the same Redis and
// descriptors, for reference. After each envoy run its organisation
// counters are read from Redis.
//
// The same calls, in the same order (a fixed seed, skewed over
// organisations and users), from 64 concurrent callers, beside 2 CPU
// burners. Then the sluice fleet under faults: one gateway killed with
// SIGKILL a third of the way in and started again; one Cluster node
// killed for 2 s and started again (empty), under on_store_error closed
// and open.
//
// Run it from bench/ (make quotafleet):
//
//	go run ./cmd/quotafleet -out out/quotafleet.md
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/bench/internal/rlsproc"
)

// options are the flags.
type options struct {
	out                 string
	calls, callers      int
	orgs, users         int
	orgLimit, userLimit int
	burners             int
	seed                uint64
	skipFaults          bool
	keep                bool
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "", "write the markdown report to this `file` (and stdout)")
	flag.IntVar(&o.calls, "calls", 9600, "calls of each run")
	flag.IntVar(&o.callers, "callers", 64, "concurrent callers")
	flag.IntVar(&o.orgs, "orgs", 8, "organisations")
	flag.IntVar(&o.users, "users", 40, "users of each organisation")
	flag.IntVar(&o.orgLimit, "org-limit", 600, "an organisation's pool a day")
	flag.IntVar(&o.userLimit, "user-limit", 50, "a user's budget a day, within the organisation")
	flag.IntVar(&o.burners, "burners", 2, "CPU burners running beside the runs")
	flag.Uint64Var(&o.seed, "seed", 35, "the traffic's seed")
	flag.BoolVar(&o.skipFaults, "skip-faults", false, "leave out the fault runs")
	flag.BoolVar(&o.keep, "keep", false, "keep the working directory (the processes' logs) and say where it is")
	flag.Parse()
	if o.calls < 1 || o.callers < 1 || o.orgs < 1 || o.users < 1 || o.orgLimit < 1 || o.userLimit < 1 {
		fatalf("-calls, -callers, -orgs, -users and the limits must be positive")
	}
	if !redistest.Available() {
		fatalf("redis-server and redis-cli are needed (%s)", redistest.Install)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	go func() {
		<-sig
		fatalf("interrupted")
	}()

	// The counters are a calendar day's: keep the runs within one.
	now := time.Now().UTC()
	if left := now.Truncate(24 * time.Hour).Add(24 * time.Hour).Sub(now); left < 10*time.Minute {
		fmt.Fprintf(os.Stderr, "waiting %v for the UTC day to turn\n", left.Round(time.Second))
		time.Sleep(left + time.Second)
	}

	rep := &report{o: o, began: time.Now()}
	runAll(o, rep)
	rep.ended = time.Now()
	var b strings.Builder
	rep.write(&b)
	fmt.Print(b.String())
	if o.out != "" {
		os.MkdirAll(filepath.Dir(o.out), 0o755)
		if err := os.WriteFile(o.out, []byte(b.String()), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
	runCleanups()
	if len(rep.violations) > 0 {
		os.Exit(1)
	}
}

func runAll(o options, rep *report) {
	work, err := os.MkdirTemp("", "quotafleet")
	if err != nil {
		fatalf("%v", err)
	}
	if o.keep {
		fmt.Fprintf(os.Stderr, "working directory %s\n", work)
	} else {
		atExit(func() { os.RemoveAll(work) })
	}

	envoyBin := make(chan error, 1)
	envoyPath := ""
	go func() {
		t0 := time.Now()
		p, err := rlsproc.BuildEnvoy(filepath.Join(work, "envoy"))
		envoyPath = p
		if err == nil {
			fmt.Fprintf(os.Stderr, "built envoyproxy/ratelimit %s in %.0fs\n", rlsproc.EnvoyVersion, time.Since(t0).Seconds())
		}
		envoyBin <- err
	}()
	bin := filepath.Join(work, "sluice")
	build := exec.Command("go", "build", "-C", "..", "-o", bin, "./cmd/sluice")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fatalf("building sluice: %v", err)
	}
	if err := <-envoyBin; err != nil {
		fatalf("building envoyproxy/ratelimit: %v", err)
	}
	rep.commit = rlsproc.Command("git", "-C", "..", "rev-parse", "--short=12", "HEAD")
	rep.redisVersion = rlsproc.Command("redis-server", "--version")

	cluster, err := redistest.NewCluster(3)
	if err != nil {
		fatalf("starting the Cluster: %v", err)
	}
	atExit(cluster.Kill)
	f := &fleet{bin: bin, work: work, cluster: cluster, o: o}
	for _, a := range cluster.Addrs() {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		atExit(func() { c.Close() })
		f.nodes = append(f.nodes, c)
	}
	if f.faulted, err = f.nodeOf(0); err != nil {
		fatalf("%v", err)
	}
	for org := range o.orgs {
		if n, err := f.nodeOf(org); err == nil && n == f.faulted {
			f.onNode = append(f.onNode, org)
		}
	}
	rep.faulted = f
	up, closeUp, err := startUpstream()
	if err != nil {
		fatalf("%v", err)
	}
	atExit(func() { closeUp() })
	f.up = up

	rds, runtimeRoot, err := startPeerRedis(work, o)
	if err != nil {
		fatalf("starting redis-server: %v", err)
	}
	atExit(rds.Stop)

	startBurners(o.burners)
	calls := traffic(o.calls, o.orgs, o.users, o.seed)
	rep.calls = calls

	sluiceRun := func(name, policy, fault string) {
		r, err := f.run(name, policy, fault, calls)
		if err != nil {
			fatalf("%s: %v", name, err)
		}
		fmt.Fprintf(os.Stderr, "%s: admitted %d denied %d unavailable %d failed %d in %v\n", name,
			r.t.total(admitted), r.t.total(denied), r.t.total(unavailable), r.t.total(failed), r.took.Round(time.Millisecond))
		rep.sluice = append(rep.sluice, r)
	}
	rlsRunOn := func(name string, s *rlsproc.Server, envoyKeys bool) {
		r, err := runRLS(name, s, rds, o, calls, envoyKeys)
		if err != nil {
			fatalf("%s: %v", name, err)
		}
		fmt.Fprintf(os.Stderr, "%s: admitted %d denied %d unavailable %d in %v\n", name,
			r.t.total(admitted), r.t.total(denied), r.t.total(unavailable), r.took.Round(time.Millisecond))
		rep.rls = append(rep.rls, r)
	}

	// A warm-up of each system, uncounted: connections, scripts loaded.
	warm := traffic(2000, o.orgs, o.users, o.seed+1)
	if _, err := f.run("warmup", "closed", "", warm); err != nil {
		fatalf("warm-up: %v", err)
	}

	sluiceRun("sluice", "closed", "")
	for _, stop := range []bool{false, true} {
		name := "envoy"
		if stop {
			name = "envoy-stop-increment"
		}
		s, err := startEnvoy(envoyPath, rds.Addr, runtimeRoot, filepath.Join(work, name+".log"), stop)
		if err != nil {
			fatalf("starting %s: %v", name, err)
		}
		runRLS(name+"-warmup", s, rds, o, warm, false)
		rlsRunOn(name, s, true)
		s.Stop()
	}
	{
		s, err := rlsproc.StartSluice("sluice rls", bin, []string{"rls", "--config", filepath.Join(runtimeRoot, "ratelimit", "config"),
			"--grpc", "127.0.0.1:0", "--backend", "redis", "--redis-addr", rds.Addr}, nil)
		if err == nil {
			if err = s.Ready(30*time.Second, probe); err != nil {
				s.Stop()
			}
		}
		if err != nil {
			fatalf("starting sluice rls: %v", err)
		}
		runRLS("sluice-rls-warmup", s, rds, o, warm, false)
		rlsRunOn("sluice-rls", s, false)
		s.Stop()
	}
	if !o.skipFaults {
		sluiceRun("kill-gateway", "closed", "kill-gateway")
		sluiceRun("pause-node-closed", "closed", "pause-node")
		sluiceRun("pause-node-open", "open", "pause-node")
		sluiceRun("crash-node-closed", "closed", "crash-node")
	}
	rep.check()
}

// startBurners starts n CPU burners, killed at the end.
func startBurners(n int) {
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			fatalf("starting a CPU burner: %v", err)
		}
		atExit(func() { cmd.Process.Kill(); cmd.Wait() })
	}
}

func host() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs, %s, %s/%s", runtime.NumCPU(), cpu, runtime.GOOS, runtime.GOARCH)
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "quotafleet: "+format+"\n", args...)
	runCleanups()
	os.Exit(1)
}
