// Command flood sends millions of distinct keys through a Sluice engine at
// full speed, the way an attacker floods a rate limiter with fresh
// identities, and checks that memory and disk stay bounded by the keys
// active within their TTL.
//
//	go run ./internal/cmd/flood -keys 10000000 -backend memory|pebble [-dir D] [-ttl 1s] [-maxkeys N]
//
// The keys are what the httplimit middleware would count callers under:
// half are clients at random addresses, each in its own IPv6 /64 ("ip:"
// and the /64, via Identifier.IPKey), half random API keys ("key:" and a
// hash, via Identifier.Key). Each gets one request under a rule of limit 1
// per -ttl, so its record expires -ttl after it arrives. The memory backend
// runs its own background sweeper, as sluice serve runs it; over Pebble the
// engine's in-memory tier (Interval mode) sweeps its cache the same way and
// Pebble's sweeper walks the disk every -pebble-sweep.
//
// Every -sample it prints the keys sent, the keys held in memory
// (engine.Len), the resident set (VmRSS) and, over Pebble, the bytes under
// the directory. After the flood it waits until every flood key has expired
// and been swept, from memory and from disk. It then checks, and exits 1
// naming each bound broken:
//
//	live(t) ≤ keys sent in (t − W − stalls, t] × slack + 64   (≤ MaxKeys)
//	W = TTL + 2 × sweep period
//	peak RSS (VmHWM) ≤ RSS before + 64 MiB (over Pebble 120 MiB + its block cache, 64 MiB by default) + peak live × 400 B
//	peak disk ≤ disk before + 64 MiB + rate × (TTL + 50ms + 2 × Pebble sweep) × 200 B × slack
//	after the flood: only the victim left in memory, no flood record on disk,
//	every flood key evicted by sweeping
//
// checked every 10ms, where W is the time a key can stay before the sweeper
// reaches it (each run examines every key held), stalls is the time within
// the window in which
// the process did not run at all (its 10ms reading came over 40ms late;
// neither did the sweeper), rate is the keys sent per second over the whole
// flood and TTL the largest TTL a flood decision carried. The constants
// were measured on 10,000,000-key floods.
//
// Before the flood a victim spends its whole budget under a one-hour rule;
// it must stay denied throughout. With -maxkeys the memory store is capped:
// new keys beyond it must be refused with backend.ErrFull (some must be),
// and the victim must still keep its spent budget.
//
// The memory sweeper examines every key held each SweepInterval, in steps
// of at most SweepBatch keys per shard lock, so a flood cannot outrun it.
// -sweep-batch, -sweep-interval and -stripes set the memory backend's
// sweeper; over Pebble only -stripes reaches the tier's cache. -no-sweeper
// turns the memory backend's sweeper off but keeps the bounds of one: the
// run must fail, which shows the checks can.
//
// Exit status: 0 within bounds, 1 a bound broken or an error, 2 bad flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"time"
)

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain parses args, runs the flood, prints its summary to stdout and its
// samples and failures to stderr, and returns the exit status.
func runMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("flood", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := config{progress: stderr}
	fs.IntVar(&cfg.keys, "keys", 10_000_000, "distinct `keys` to send")
	fs.StringVar(&cfg.backend, "backend", "memory", "the `store`: memory or pebble")
	fs.StringVar(&cfg.dir, "dir", "", "Pebble's `directory` (default: a temporary one, removed at the end)")
	fs.DurationVar(&cfg.ttl, "ttl", time.Second, "the flood rule's window: each key's TTL")
	fs.StringVar(&cfg.algorithm, "algorithm", "token_bucket", "the flood rule's `algorithm`")
	fs.IntVar(&cfg.workers, "workers", runtime.GOMAXPROCS(0), "goroutines sending keys")
	fs.DurationVar(&cfg.sample, "sample", time.Second, "period of the RSS and disk samples")
	fs.IntVar(&cfg.stripes, "stripes", 0, "engine stripes and memory shards, a power of two (default 256)")
	fs.DurationVar(&cfg.sweepInterval, "sweep-interval", 0, "memory backend SweepInterval (default 1s)")
	fs.IntVar(&cfg.sweepBatch, "sweep-batch", 0, "memory backend SweepBatch, keys per shard per sweep (default 1024)")
	fs.BoolVar(&cfg.noSweeper, "no-sweeper", false, "turn the memory backend's sweeper off, keeping the bounds of one (the checks must then fail)")
	fs.DurationVar(&cfg.pebbleSweep, "pebble-sweep", 0, "Pebble SweepInterval (default 10s)")
	fs.Int64Var(&cfg.pebbleCache, "pebble-cache", 0, "Pebble's block cache in `bytes` (default: the store's)")
	fs.IntVar(&cfg.maxKeys, "maxkeys", 0, "memory backend MaxKeys (default unlimited)")
	fs.Float64Var(&cfg.slack, "slack", 1.5, "multiplies the live-key and disk bounds")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the flood and its settling to `file`")
	fs.DurationVar(&cfg.settle, "settle", 0, "longest wait for the flood's keys to be swept (default derived from the TTL, sweep periods and peak)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "flood: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(stderr, "flood: %v\n", err)
		return 2
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "flood: -cpuprofile: %v\n", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "flood: -cpuprofile: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	r, err := run(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "flood: %v\n", err)
		return 1
	}
	r.summary(stdout)
	if fails := r.check(); len(fails) > 0 {
		for _, f := range fails {
			fmt.Fprintf(stderr, "flood: FAIL: %s\n", f)
		}
		return 1
	}
	fmt.Fprintln(stdout, "flood: ok, every bound held")
	return 0
}

// summary prints the flood's figures and bounds as a table.
func (r *result) summary(w io.Writer) {
	b := r.bounds()
	name := r.cfg.backend
	if r.cfg.maxKeys > 0 {
		name += fmt.Sprintf(" maxkeys=%d", r.cfg.maxKeys)
	}
	fmt.Fprintf(w, "| backend | keys | elapsed | keys/s | peak live | peak RSS | peak disk | final live | final disk |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(w, "| %s | %d | %.1fs | %.0f | %d | %.1f MiB | %.1f MiB | %d | %.1f MiB |\n",
		name, r.sent, r.elapsed.Seconds(), r.rate, r.peakLive, mib(r.peakRSS), mib(r.peakDisk), r.finalLive, mib(r.finalDisk))
	fmt.Fprintf(w, "TTL %v; memory sweeper every %v, examining every key held; swept clean %v after the flood; longest stall of the process %v\n",
		r.maxTTL, r.sweepLag, r.settled.Round(time.Millisecond), r.longestStall().Round(time.Millisecond))
	fmt.Fprintf(w, "bounds: window %s; live keys %d at %v against %d (closest approach); RSS %.1f MiB (base %.1f MiB, %.0f B per peak live key above base)",
		b.window.Round(time.Millisecond), b.peak, b.liveAt.Round(time.Millisecond), b.live, mib(b.rss), mib(r.baseRSS), perKey(r.peakRSS-r.baseRSS, r.peakLive))
	if r.cfg.backend == "pebble" {
		fmt.Fprintf(w, "; disk %.1f MiB (base %.1f MiB); flood records left on disk %d", mib(b.disk), mib(r.baseDisk), r.diskRecords)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "sent %d, stored %d, refused (ErrFull) %d, evicted by sweeping %d\n", r.sent, r.admitted, r.refused, r.evictions)
}

func perKey(bytes int64, keys int) float64 {
	if keys == 0 {
		return 0
	}
	return float64(bytes) / float64(keys)
}
