package engine

import (
	"sync"
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
