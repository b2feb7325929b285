package engine_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// waitTick returns the clock's next reading after from, failing the test if
// the clock has not moved within 10s (a clock that ticks each millisecond
// moves at once; the bound is only for a machine too busy to schedule it).
func waitTick(t *testing.T, c *engine.CoarseClock, from int64) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if now := c.Now(); now != from {
			return now
		}
		runtime.Gosched()
	}
	t.Fatalf("the coarse clock did not tick within 10s of %d", from)
	return 0
}

// TestCoarseClock: the clock starts at the system clock's time, ticks
// forward, never runs ahead of the system clock nor steps back, and stands
// still once closed.
func TestCoarseClock(t *testing.T) {
	before := engine.SystemClock{}.Now()
	c := engine.NewCoarseClock(time.Millisecond)
	t.Cleanup(c.Close)
	first := c.Now()
	if after := (engine.SystemClock{}).Now(); first < before || first > after {
		t.Fatalf("a new clock reads %d, want the system clock's time, in [%d, %d]", first, before, after)
	}
	last := first
	for range 3 {
		now := waitTick(t, c, last)
		if now < last {
			t.Fatalf("the clock stepped back from %d to %d", last, now)
		}
		if sys := (engine.SystemClock{}).Now(); now > sys {
			t.Fatalf("the clock reads %d, ahead of the system clock's %d", now, sys)
		}
		last = now
	}
	c.Close()
	c.Close() // a second Close does nothing
	stopped := c.Now()
	time.Sleep(5 * time.Millisecond) // several ticks, were it still running
	if now := c.Now(); now != stopped {
		t.Fatalf("a closed clock moved from %d to %d", stopped, now)
	}
	if def := engine.NewCoarseClock(0); def == nil {
		t.Fatal("NewCoarseClock(0) = nil")
	} else {
		def.Close()
	}
}

// TestEngineClockTick: Options.ClockTick gives the engine a coarse clock,
// which its decisions read and Close stops; a Clock given takes precedence.
func TestEngineClockTick(t *testing.T) {
	e, err := engine.New(memory.New(nil), &engine.Options{ClockTick: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c, ok := e.Clock().(*engine.CoarseClock)
	if !ok {
		t.Fatalf("Clock() = %T with ClockTick set, want *engine.CoarseClock", e.Clock())
	}
	// The second request is denied until the first's hour has passed in
	// the clock's time: by the hour less what the clock moved between them.
	l := engine.Limit{Namespace: "n", Algorithm: algo.MustNew(algo.GCRAName, algo.Params{Limit: 1, Window: time.Hour})}
	before := c.Now()
	d, err := e.Apply(context.Background(), l, "k", 1)
	if err != nil || !d.Allowed {
		t.Fatalf("first request: %+v, %v", d, err)
	}
	if d, _ := e.Apply(context.Background(), l, "k", 1); d.Allowed {
		t.Fatalf("second request within the hour allowed: %+v", d)
	} else if moved := time.Duration(c.Now() - before); d.RetryAfter > time.Hour || d.RetryAfter < time.Hour-moved {
		t.Fatalf("RetryAfter %v, want an hour less at most the %v the clock moved", d.RetryAfter, moved)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	stopped := c.Now()
	time.Sleep(5 * time.Millisecond)
	if now := c.Now(); now != stopped {
		t.Fatalf("the engine's coarse clock moved from %d to %d after Close", stopped, now)
	}

	fake := engine.NewFakeClock(t0)
	e2, err := engine.New(memory.New(nil), &engine.Options{Clock: fake, ClockTick: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	if e2.Clock() != engine.Clock(fake) {
		t.Fatalf("Clock() = %T with both Clock and ClockTick set, want the Clock given", e2.Clock())
	}
}
