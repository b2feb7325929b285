package bench

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/backend/redis/redistest"
)

// startRedis starts a redis-server for the test (skipping it when there is
// none) and returns its config and an admin client.
func startRedis(t *testing.T) (RedisConfig, *goredis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	return RedisConfig{Addr: srv.Addr, Timeout: time.Second}, admin
}

// TestRedisLimitersLimit proves every Redis-backed wrapper limits: a limit of
// n per thousand hours admits exactly n of 3n/2 calls on one key, and a
// second key has its own n.
func TestRedisLimitersLimit(t *testing.T) {
	cfg, admin := startRedis(t)
	const n = 20
	for _, lib := range RedisLibraries() {
		if lib.Floor {
			continue
		}
		t.Run(lib.Name, func(t *testing.T) {
			if err := FlushRedis(context.Background(), admin); err != nil {
				t.Fatal(err)
			}
			lim, err := lib.New(cfg, Rate{Limit: n, Window: 1000 * time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer lim.Close()
			for _, key := range []string{"alice", "bob"} {
				admitted := 0
				for i := range 3 * n / 2 {
					ok, err := lim.Allow(key)
					if err != nil {
						t.Fatalf("%s call %d: %v", key, i, err)
					}
					if ok {
						if i >= n {
							t.Fatalf("%s: call %d admitted past the limit of %d", key, i, n)
						}
						admitted++
					}
				}
				if admitted != n {
					t.Fatalf("%s: admitted %d of %d calls, want %d", key, admitted, 3*n/2, n)
				}
			}
		})
	}
}

// TestRedisLimitersAcrossInstances spends one key from four limiters (each
// with its own client, as four processes would have) of eight goroutines
// each. Sluice must admit no more than the limit, and exactly the limit but
// for calls that failed; the peers are only logged.
func TestRedisLimitersAcrossInstances(t *testing.T) {
	cfg, admin := startRedis(t)
	const limit, instances, goroutines, tries = 50, 4, 8, 10
	for _, lib := range RedisLibraries() {
		if lib.Floor {
			continue
		}
		t.Run(lib.Name, func(t *testing.T) {
			if err := FlushRedis(context.Background(), admin); err != nil {
				t.Fatal(err)
			}
			lims := make([]Limiter, instances)
			for i := range lims {
				l, err := lib.New(cfg, Rate{Limit: limit, Window: 1000 * time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				lims[i] = l
			}
			var (
				wg                  sync.WaitGroup
				mu                  sync.Mutex
				admitted, errs, den uint64
				firstErr            error
			)
			for _, l := range lims {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a, d, e, ferr := Spend(l, "shared", goroutines, tries, time.Time{})
					mu.Lock()
					admitted, den, errs = admitted+a, den+d, errs+e
					if firstErr == nil {
						firstErr = ferr
					}
					mu.Unlock()
				}()
			}
			wg.Wait()
			t.Logf("admitted %d, denied %d, errors %d of %d calls, limit %d (first error: %v)", admitted, den, errs, instances*goroutines*tries, limit, firstErr)
			if admitted+den+errs != instances*goroutines*tries {
				t.Fatalf("counted %d calls, made %d", admitted+den+errs, instances*goroutines*tries)
			}
			if !strings.HasPrefix(lib.Name, "sluice") {
				return
			}
			if admitted > limit || admitted+errs < limit {
				t.Fatalf("admitted %d with %d errors, want %d", admitted, errs, limit)
			}
		})
	}
}

// TestRedisLoad runs the driver's core on a hot key and on many keys and
// checks what it reads from the server: a floor is one script and one
// round trip per call from a plain client, and Sluice on a hot key under
// concurrent callers coalesces (fewer scripts than decisions, as many
// scripts as swaps).
func TestRedisLoad(t *testing.T) {
	cfg, admin := startRedis(t)
	ctx := context.Background()
	for _, tc := range []struct {
		lib     string
		keys    []string
		callers int
		check   func(t *testing.T, r *LoadResult, d ServerDelta, s SwapStats)
	}{
		{"floor-goredis", Keys(1000), 4, func(t *testing.T, r *LoadResult, d ServerDelta, _ SwapStats) {
			if d.Scripts != int64(r.Decisions) || d.Reads < d.Scripts || d.Reads > d.Scripts+10 {
				t.Errorf("%d decisions: %d scripts and %d reads, want one each per decision", r.Decisions, d.Scripts, d.Reads)
			}
		}},
		{"floor-rueidis", []string{"hot"}, 16, func(t *testing.T, r *LoadResult, d ServerDelta, _ SwapStats) {
			if d.Scripts != int64(r.Decisions) {
				t.Errorf("%d decisions: %d scripts, want one per decision", r.Decisions, d.Scripts)
			}
		}},
		{"sluice-gcra", []string{"hot"}, 16, func(t *testing.T, r *LoadResult, d ServerDelta, s SwapStats) {
			if s.Swaps == 0 || d.Scripts != int64(s.Swaps) || s.Swaps >= r.Decisions {
				t.Errorf("%d decisions: %d scripts, %d swaps; want one script per swap and fewer swaps than decisions", r.Decisions, d.Scripts, s.Swaps)
			}
		}},
		{"sluice-token_bucket", Keys(1000), 4, func(t *testing.T, r *LoadResult, d ServerDelta, s SwapStats) {
			if d.Scripts != int64(s.Swaps) || s.Swaps < r.Decisions {
				t.Errorf("%d decisions on %d keys: %d scripts, %d swaps; want a swap per decision, a script per swap", r.Decisions, 1000, d.Scripts, s.Swaps)
			}
		}},
	} {
		t.Run(tc.lib, func(t *testing.T) {
			lib, err := RedisLibraryNamed(tc.lib)
			if err != nil {
				t.Fatal(err)
			}
			if err := FlushRedis(ctx, admin); err != nil {
				t.Fatal(err)
			}
			lim, err := lib.New(cfg, RedisRateFor(lib, len(tc.keys) == 1))
			if err != nil {
				t.Fatal(err)
			}
			defer lim.Close()
			if r := (Load{Keys: tc.keys, Callers: tc.callers, Count: len(tc.keys)}).Run(lim); r.Errors != 0 || r.Decisions != uint64(len(tc.keys)) {
				t.Fatalf("warm-up: %d decisions, %d errors (%v)", r.Decisions, r.Errors, r.FirstErr)
			}
			sc, _ := lim.(SwapCounter)
			var s0, s1 SwapStats
			if sc != nil {
				s0 = sc.SwapStats()
			}
			before, err := ReadServerCounters(ctx, admin)
			if err != nil {
				t.Fatal(err)
			}
			r := Load{Keys: tc.keys, Callers: tc.callers, Duration: 200 * time.Millisecond}.Run(lim)
			after, err := ReadServerCounters(ctx, admin)
			if err != nil {
				t.Fatal(err)
			}
			if sc != nil {
				s1 = sc.SwapStats()
			}
			if r.Errors != 0 || r.Denied != 0 || r.Decisions == 0 || r.Latency.Count() != r.Decisions {
				t.Fatalf("%d decisions, %d denied, %d errors (%v), %d latencies", r.Decisions, r.Denied, r.Errors, r.FirstErr, r.Latency.Count())
			}
			d := after.Delta(before)
			s := SwapStats{Swaps: s1.Swaps - s0.Swaps, Conflicts: s1.Conflicts - s0.Conflicts}
			t.Logf("%d decisions (%.0f/s, p50 %v, p99 %v): %d reads, %d scripts, %d commands, %d swaps",
				r.Decisions, r.PerSecond(), r.Latency.Quantile(0.5), r.Latency.Quantile(0.99), d.Reads, d.Scripts, d.Commands, s.Swaps)
			tc.check(t, r, d, s)
		})
	}
}

func TestHistogram(t *testing.T) {
	var h, g Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	g.Record(time.Hour)
	h.Merge(&g)
	if h.Count() != 1001 {
		t.Fatalf("count %d", h.Count())
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 501 * time.Microsecond}, {0.99, 991 * time.Microsecond}, {0, time.Microsecond}, {1, time.Hour}} {
		got := h.Quantile(c.q)
		if d := float64(got-c.want) / float64(c.want); d > 0.016 || d < -0.016 {
			t.Errorf("quantile %v: %v, want %v within 1.6%%", c.q, got, c.want)
		}
	}
	for v := int64(0); v < 1<<20; v = v*9/8 + 1 {
		if i := histIndex(v); i >= histBuckets || histIndex(histValue(i)) != i {
			t.Fatalf("value %d: bucket %d, whose middle %d is in bucket %d", v, i, histValue(i), histIndex(histValue(i)))
		}
	}
}
