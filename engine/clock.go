package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the engine the time. Tests replace it with a FakeClock so that
// no test sleeps to watch a window roll.
type Clock interface {
	// Now returns the current time in Unix nanoseconds.
	Now() int64
}

// SystemClock is the system clock as a rate limiter wants it: the wall
// clock read once, when the program starts, and advanced from then on by the
// monotonic clock. It never steps backwards when NTP or an operator steps
// the wall clock, and a read costs one monotonic clock read instead of
// time.Now's two.
type SystemClock struct{}

var (
	clockStart = time.Now()
	clockBase  = clockStart.UnixNano()
)

// Now returns the current time in Unix nanoseconds.
func (SystemClock) Now() int64 { return clockBase + int64(time.Since(clockStart)) }

// CoarseClock is a Clock that reads memory instead of the system clock: a
// goroutine stores SystemClock's time every tick, and Now returns the time
// last stored, one atomic load where SystemClock costs a monotonic clock
// read (a quarter to a third of a hot key's decision on a virtual machine).
// It is meant for engines deciding at rates where that read shows; the
// price is resolution, which is the tick's:
//
//   - Decisions resolve to the tick. Every request in one tick is decided
//     at the tick's start, as if it had arrived then; the clock never runs
//     ahead of the system clock, never steps back, and lags it by up to one
//     tick (more when the process is so busy that the goroutine runs late).
//   - Each algorithm stays exact in the clock's time, so every limit holds
//     there. Against the system clock an interval T is seen as up to T plus
//     the lag, so a limit may admit, in a real interval T, what it admits in
//     T plus one tick: a token bucket of r per second at most r·tick more
//     over any interval, a window algorithm a window that ends up to a tick
//     late.
//   - A RetryAfter is reckoned from the tick's start: a request repeated
//     exactly RetryAfter later may arrive before the clock has ticked past
//     it and be denied again, for at most one more tick.
//
// A tick of a millisecond or less is far below any limit's window; the
// goroutine then wakes a thousand times a second. Close stops it. A
// CoarseClock is safe for concurrent use.
type CoarseClock struct {
	// now is every decision's read and the ticking goroutine's only
	// write; the padding on each side keeps any other object's writes off
	// its cache line, wherever the allocator puts the clock, so a decision
	// misses on it only once a tick.
	_    [cacheLine - 8]byte
	now  atomic.Int64 // the time last stored, Unix nanoseconds
	_    [cacheLine - 8]byte
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// cacheLine is the cache line size the layouts assume: 64 bytes on amd64
// and most arm64 cores (128-byte lines, or adjacent-line prefetching, make
// padding of 64 halve false sharing rather than end it).
const cacheLine = 64

// DefaultClockTick is the tick of NewCoarseClock when it is given zero or
// less.
const DefaultClockTick = time.Millisecond

// NewCoarseClock returns a CoarseClock that stores the time every tick (zero
// or less means DefaultClockTick), and has stored it once already.
func NewCoarseClock(tick time.Duration) *CoarseClock {
	if tick <= 0 {
		tick = DefaultClockTick
	}
	c := &CoarseClock{stop: make(chan struct{}), done: make(chan struct{})}
	c.now.Store(SystemClock{}.Now())
	go c.run(tick)
	return c
}

func (c *CoarseClock) run(tick time.Duration) {
	defer close(c.done)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.now.Store(SystemClock{}.Now())
		}
	}
}

// Now returns the time stored at the clock's last tick, in Unix
// nanoseconds.
func (c *CoarseClock) Now() int64 { return c.now.Load() }

// Close stops the clock's goroutine and waits for it to return; the clock
// then stands still at its last tick. A second Close does nothing.
func (c *CoarseClock) Close() {
	c.once.Do(func() {
		close(c.stop)
		<-c.done
	})
}

// FakeClock is a Clock that moves only when told to. It is safe for
// concurrent use.
type FakeClock struct {
	mu  sync.Mutex // guards now
	now int64
}

// NewFakeClock returns a FakeClock set to t.
func NewFakeClock(t time.Time) *FakeClock { return &FakeClock{now: t.UnixNano()} }

// Now returns the clock's time in Unix nanoseconds.
func (c *FakeClock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t, forwards or backwards.
func (c *FakeClock) Set(t time.Time) { c.SetUnixNano(t.UnixNano()) }

// SetUnixNano moves the clock to ns Unix nanoseconds.
func (c *FakeClock) SetUnixNano(ns int64) {
	c.mu.Lock()
	c.now = ns
	c.mu.Unlock()
}

// Advance moves the clock by d, which may be negative.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now += int64(d)
	c.mu.Unlock()
}
