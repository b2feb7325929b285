package redis_test

import (
	"context"
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
// the next batch to fail as well (that was up to two deadlines).
//
// The deadline is long beside the scheduling delays of a loaded machine
// under the race detector (tens of milliseconds, at times over a hundred),
// so that one deadline plus them stays well apart from two deadlines.
func TestBatchedSwapsKeepTheirDeadline(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 400 * time.Millisecond
	s := open(t, []string{srv.Addr}, redis.Options{Timeout: timeout, BreakerMinCalls: -1})
	for i := range 64 { // the pool's connections, made while Redis answers
		key := []byte(fmt.Sprintf("warm-%d", i))
		if _, _, _, err := s.CompareAndSwap(context.Background(), []backend.Swap{{Key: key, Value: []byte("v"), TTL: time.Minute}}); err != nil {
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
	until := time.Now().Add(4 * timeout)
	for c := range 64 {
		wg.Go(func() {
			for i := 0; time.Now().Before(until); i++ {
				key := []byte(fmt.Sprintf("k-%d-%d", c, i))
				start := time.Now()
				_, _, _, err := s.CompareAndSwap(context.Background(), []backend.Swap{{Key: key, Value: []byte("v"), TTL: time.Minute}})
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
	// The allowance past the deadline is the process' own lateness three
	// times (the timer or the read that ends a call at its due, the
	// flight's turn at the lock to answer it, then its caller's wake, each
	// of which can meet the delay the sampler saw: a burst of 64 callers
	// woken at once queue for two cores), and a quarter of the deadline. A
	// swap that waited for a second call to fail took up to two deadlines.
	allowed := timeout + 3*worst + timeout/4
	if most > allowed {
		t.Errorf("a swap took %v with a %v deadline (the process' timers were at most %v late: allowed %v)", most, timeout, worst, allowed)
	}
	if allowed >= 2*timeout {
		t.Logf("this run's scheduling was too late (%v) to tell one deadline from two", worst)
	}
	t.Logf("%d swaps on a stopped server, the slowest %v with a %v deadline; timers at most %v late", calls.Load(), most, timeout, worst)
}
