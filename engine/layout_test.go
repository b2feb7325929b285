package engine

import (
	"testing"
	"unsafe"
)

// TestLayout checks that what every decision reads shares no cache line
// with anything written: the CoarseClock's time, written once a tick, has
// a line to itself wherever the allocator puts it, and the Engine's
// counters lie a full line after the fields every decision reads.
func TestLayout(t *testing.T) {
	var c CoarseClock
	if before := unsafe.Offsetof(c.now); before < cacheLine-8 {
		t.Errorf("CoarseClock.now is at %d, want at least %d bytes of padding before it", before, cacheLine-8)
	}
	if after := unsafe.Offsetof(c.stop) - (unsafe.Offsetof(c.now) + 8); after < cacheLine-8 {
		t.Errorf("CoarseClock.now has %d bytes after it, want at least %d", after, cacheLine-8)
	}
	var e Engine
	if start := unsafe.Offsetof(e.b); start < cacheLine-8 {
		t.Errorf("the Engine's read fields start at %d, want at least %d", start, cacheLine-8)
	}
	readEnd := unsafe.Offsetof(e.closed) + unsafe.Sizeof(e.closed)
	if gap := unsafe.Offsetof(e.corrupt) - readEnd; gap < cacheLine-8 {
		t.Errorf("the Engine's counters start %d bytes after its read fields, want at least %d", gap, cacheLine-8)
	}
}
