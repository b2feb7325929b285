package bench

import (
	"bufio"
	"context"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// This file is the core of cmd/redisbench: a closed-loop load of concurrent
// callers against one Limiter, a latency histogram, and the server's own
// counters read before and after.

// Histogram counts durations in log-linear buckets: exact below 128 ns, then
// 64 buckets per power of two (a bucket is at most 1/64 of its value wide,
// so a quantile read from it is within 1.6%). The zero value is empty and
// ready; it is not safe for concurrent use (give each goroutine its own and
// Merge them).
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	max    int64
}

const (
	histSub     = 7 // 2^histSub exact values, then 2^(histSub-1) buckets per octave
	histHalf    = 1 << (histSub - 1)
	histBuckets = (64 - histSub + 2) * histHalf
)

func histIndex(v int64) int {
	if v < 0 {
		v = 0
	}
	u := uint64(v)
	if u < 1<<histSub {
		return int(u)
	}
	s := bits.Len64(u) - histSub // ≥ 1
	return (s+1)*histHalf + int(u>>s) - histHalf
}

// histValue returns the middle of bucket i.
func histValue(i int) int64 {
	if i < 1<<histSub {
		return int64(i)
	}
	s := i/histHalf - 1
	m := uint64(i%histHalf + histHalf)
	lo := m << s
	return int64(lo + (uint64(1)<<s)/2)
}

// Record counts one duration.
func (h *Histogram) Record(d time.Duration) {
	h.counts[histIndex(int64(d))]++
	h.n++
	if int64(d) > h.max {
		h.max = int64(d)
	}
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// Count returns the number of durations recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Quantile returns the duration at quantile q in [0, 1] (0 when empty).
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n-1)) + 1
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(histValue(i), h.max))
		}
	}
	return time.Duration(h.max)
}

// ServerCounters are what redis-server reports of the work it did: calls
// per command from INFO commandstats (a command a script runs is counted
// too, under its own name) and total_reads_processed from INFO stats, the
// reads from client sockets: one per request a client sent and waited for,
// one per batch for a pipeline that arrives in one read.
type ServerCounters struct {
	Calls map[string]int64
	Reads int64
}

// ReadServerCounters reads the counters through c with one INFO command,
// which the next reading counts (see ServerDelta).
func ReadServerCounters(ctx context.Context, c *goredis.Client) (ServerCounters, error) {
	info, err := c.Info(ctx, "commandstats", "stats").Result()
	if err != nil {
		return ServerCounters{}, err
	}
	sc := ServerCounters{Calls: map[string]int64{}}
	s := bufio.NewScanner(strings.NewReader(info))
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if name == "total_reads_processed" {
			sc.Reads, _ = strconv.ParseInt(rest, 10, 64)
			continue
		}
		cmd, ok := strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				sc.Calls[cmd], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return sc, s.Err()
}

// ServerDelta is the server's work between two readings, less the INFO
// commands that took the readings (and their socket reads).
type ServerDelta struct {
	// Calls per command, every command a script ran included.
	Calls map[string]int64
	// Scripts counts EVAL, EVALSHA, FCALL and their read-only forms: the
	// scripts run, each one request.
	Scripts int64
	// Commands is every command run, scripts' own calls included.
	Commands int64
	// Reads is the client socket reads: the round trips the server saw.
	Reads int64
}

// Delta returns the server's work from before to after.
func (after ServerCounters) Delta(before ServerCounters) ServerDelta {
	d := ServerDelta{Calls: map[string]int64{}}
	infos := after.Calls["info"] - before.Calls["info"]
	for cmd, n := range after.Calls {
		n -= before.Calls[cmd]
		if cmd == "info" || n == 0 {
			continue
		}
		d.Calls[cmd] = n
		d.Commands += n
		switch cmd {
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
			d.Scripts += n
		}
	}
	d.Reads = after.Reads - before.Reads - infos
	return d
}

// Add adds o's work to d's.
func (d *ServerDelta) Add(o ServerDelta) {
	if d.Calls == nil {
		d.Calls = map[string]int64{}
	}
	for cmd, n := range o.Calls {
		d.Calls[cmd] += n
	}
	d.Scripts += o.Scripts
	d.Commands += o.Commands
	d.Reads += o.Reads
}

// Load is one closed-loop run: Callers goroutines, each calling Allow again
// as soon as its last call returned, for Duration.
type Load struct {
	// Keys are the keys, taken in turn by all callers together (one shared
	// counter), so that no two callers ask for one key at once unless there
	// is a single key, or fewer keys than callers.
	Keys []string
	// Callers is the number of concurrent callers.
	Callers int
	// Duration is how long the callers keep calling.
	Duration time.Duration
	// Count, when positive, ends the run once that many calls have begun,
	// whichever of Count and Duration comes first (a zero Duration is
	// then no bound): a warm-up pass over the keys is Count len(Keys).
	Count int
}

// LoadResult is what a Load measured.
type LoadResult struct {
	Decisions, Allowed, Denied, Errors uint64
	// FirstErr is the first error a call returned.
	FirstErr error
	// Elapsed is from the callers' start to the last one's end.
	Elapsed time.Duration
	// Latency holds every decision's duration (errors included).
	Latency Histogram
}

// PerSecond returns the decisions per second.
func (r *LoadResult) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Decisions) / r.Elapsed.Seconds()
}

// Run drives lim with the load and returns what it measured.
func (l Load) Run(lim Limiter) *LoadResult {
	if len(l.Keys) == 0 || l.Callers <= 0 {
		panic("bench: a Load needs keys and callers")
	}
	var (
		next    atomic.Uint64
		wg      sync.WaitGroup
		mu      sync.Mutex
		res     = &LoadResult{}
		start   = make(chan struct{})
		nkeys   = uint64(len(l.Keys))
		results = make([]*LoadResult, l.Callers)
	)
	for g := range l.Callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &LoadResult{}
			results[g] = r
			<-start
			end := time.Now().Add(l.Duration)
			if l.Duration <= 0 {
				end = time.Now().Add(24 * time.Hour)
			}
			for {
				i := next.Add(1) - 1
				if l.Count > 0 && i >= uint64(l.Count) {
					return
				}
				k := l.Keys[i%nkeys]
				t0 := time.Now()
				ok, err := lim.Allow(k)
				t1 := time.Now()
				r.Latency.Record(t1.Sub(t0))
				r.Decisions++
				switch {
				case err != nil:
					r.Errors++
					if r.FirstErr == nil {
						r.FirstErr = err
					}
				case ok:
					r.Allowed++
				default:
					r.Denied++
				}
				if !t1.Before(end) {
					return
				}
			}
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	res.Elapsed = time.Since(t0)
	mu.Lock()
	defer mu.Unlock()
	for _, r := range results {
		res.Decisions += r.Decisions
		res.Allowed += r.Allowed
		res.Denied += r.Denied
		res.Errors += r.Errors
		if res.FirstErr == nil {
			res.FirstErr = r.FirstErr
		}
		res.Latency.Merge(&r.Latency)
	}
	return res
}

// Spend is the accuracy trial's work in one process: goroutines callers,
// each calling lim.Allow(key) tries times (stopping early at deadline, when
// not zero), counting what was admitted.
func Spend(lim Limiter, key string, callers, tries int, deadline time.Time) (admitted, denied, errs uint64, firstErr error) {
	var (
		wg sync.WaitGroup
		a  atomic.Uint64
		d  atomic.Uint64
		e  atomic.Uint64
		mu sync.Mutex
	)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range tries {
				if !deadline.IsZero() && time.Now().After(deadline) {
					return
				}
				ok, err := lim.Allow(key)
				switch {
				case err != nil:
					e.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				case ok:
					a.Add(1)
				default:
					d.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return a.Load(), d.Load(), e.Load(), firstErr
}

// FlushRedis empties the server's databases (FLUSHALL SYNC) so that a run
// starts from no records.
func FlushRedis(ctx context.Context, c *goredis.Client) error {
	if err := c.Do(ctx, "FLUSHALL", "SYNC").Err(); err != nil {
		return fmt.Errorf("bench: FLUSHALL: %w", err)
	}
	return nil
}
