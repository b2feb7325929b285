package redis_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/backend/redis/redistest"
)

// TestBatchedSwapsKeepTheirDeadline: 64 callers on keys of their own (so
// that their swaps go in batches) while redis-server is stopped (SIGSTOP):
// every swap is answered within its own deadline, counted from when it
// was made, plus what the process' own scheduling was late by in the same
// run. A swap queued behind a batch already sent, which Redis does not
// answer, returns its deadline error at its deadline: it does not wait for
// the next batch to fail as well (that was two deadlines).
func TestBatchedSwapsKeepTheirDeadline(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 200 * time.Millisecond
	s := open(t, []string{srv.Addr}, redis.Options{Timeout: timeout, BreakerMinCalls: -1})
	for i := range 64 { // the pool's connections, made while Redis answers
		key := []byte(fmt.Sprintf("warm-%d", i))
		if _, _, _, err := s.CompareAndSwap([]backend.Swap{{Key: key, Value: []byte("v"), TTL: time.Minute}}); err != nil {
			t.Fatal(err)
		}
	}
	srv.Pause()
	defer srv.Resume()
	stop := make(chan struct{})
	late := redistest.Lateness(stop)
	var (
		wg      sync.WaitGroup
		slowest atomic.Int64
		calls   atomic.Int64
		bad     = make(chan error, 64)
	)
	until := time.Now().Add(1500 * time.Millisecond)
	for c := range 64 {
		wg.Go(func() {
			for i := 0; time.Now().Before(until); i++ {
				key := []byte(fmt.Sprintf("k-%d-%d", c, i))
				start := time.Now()
				_, _, _, err := s.CompareAndSwap([]backend.Swap{{Key: key, Value: []byte("v"), TTL: time.Minute}})
				took := time.Since(start)
				calls.Add(1)
				for m := slowest.Load(); int64(took) > m && !slowest.CompareAndSwap(m, int64(took)); m = slowest.Load() {
				}
				if err == nil {
					bad <- fmt.Errorf("a swap on a stopped server succeeded")
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	close(bad)
	for err := range bad {
		t.Fatal(err)
	}
	worst, most := <-late, time.Duration(slowest.Load())
	// The allowance past the deadline is the process' own lateness, twice
	// (the timer that answers a swap at its due, then its caller's wake),
	// and a tenth of the deadline: a swap that waited for a second call
	// to fail took two deadlines.
	if allowed := timeout + 2*worst + timeout/10; most > allowed {
		t.Errorf("a swap took %v with a %v deadline (the process' timers were at most %v late: allowed %v)", most, timeout, worst, allowed)
	}
	t.Logf("%d swaps on a stopped server, the slowest %v with a %v deadline; timers at most %v late", calls.Load(), most, timeout, worst)
}
