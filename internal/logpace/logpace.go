// Package logpace paces a log line that a failure may repeat on every
// request: a store that is down fails each decision, and a line per
// decision would drown the log and cost more than the decision.
package logpace

import (
	"sync/atomic"
	"time"
)

// Interval is the least time between two lines a Pace lets through.
const Interval = time.Second

// Pace lets one line through an Interval and counts the others. The zero
// value is ready to use; a Pace is safe for concurrent use and must not be
// copied after first use.
type Pace struct {
	last     atomic.Int64  // Unix ns of the last line let through
	unlogged atomic.Uint64 // lines held back since
}

// Let reports whether the line of an event at now (Unix ns) is logged:
// the first, and then the first an Interval or more after the last one
// logged. When it is, suppressed is how many were held back since the
// last one; when not, the event is counted among them. Of several events
// at once, one is logged.
func (p *Pace) Let(now int64) (ok bool, suppressed uint64) {
	last := p.last.Load()
	if (last != 0 && now-last < int64(Interval)) || !p.last.CompareAndSwap(last, now) {
		p.unlogged.Add(1)
		return false, 0
	}
	return true, p.unlogged.Swap(0)
}
