package logpace_test

import (
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/logpace"
)

// One line an interval, on a fixed timeline: the first event is logged,
// those within the interval after it are counted, and the next one logged
// says how many were held back.
func TestPace(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC).UnixNano()
	var p logpace.Pace
	for i, step := range []struct {
		at         time.Duration
		ok         bool
		suppressed uint64
	}{
		{0, true, 0},
		{time.Millisecond, false, 0},
		{999 * time.Millisecond, false, 0},
		{time.Second, true, 2},
		{time.Second, false, 0},
		{5 * time.Second, true, 1},
		{6*time.Second - 1, false, 0},
		{6 * time.Second, true, 1},
	} {
		ok, n := p.Let(t0 + int64(step.at))
		if ok != step.ok || n != step.suppressed {
			t.Errorf("step %d: Let(t0+%v) = %v, %d; want %v, %d", i, step.at, ok, n, step.ok, step.suppressed)
		}
	}
}

// Of events at one instant from many goroutines, exactly one is logged
// and the next line counts all the others.
func TestPaceConcurrent(t *testing.T) {
	const n = 64
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC).UnixNano()
	var p logpace.Pace
	var wg sync.WaitGroup
	var mu sync.Mutex
	logged := 0
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, _ := p.Let(t0); ok {
				mu.Lock()
				logged++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if logged != 1 {
		t.Fatalf("%d of %d events at once logged, want 1", logged, n)
	}
	if ok, suppressed := p.Let(t0 + int64(logpace.Interval)); !ok || suppressed != n-1 {
		t.Errorf("next line: %v, suppressed %d; want true, %d", ok, suppressed, n-1)
	}
}
