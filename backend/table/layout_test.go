package table

import (
	"testing"
	"unsafe"
)

// TestLayout checks the cache-line layout the decision path relies on: a
// shard is a whole number of lines, its lock and the memo every decision
// writes share its first line, the fields a decision only reads lie on a
// line of their own, and the Table's counters sit a full line away from
// the shards and mask every call reads.
func TestLayout(t *testing.T) {
	var sh shard
	if n := unsafe.Sizeof(sh); n%cacheLine != 0 {
		t.Errorf("a shard is %d bytes, not a whole number of %d-byte lines: neighbouring shards would share one", n, cacheLine)
	} else if lines := n / cacheLine; lines%2 == 0 {
		t.Errorf("a shard is %d lines, an even number: the lock lines of the shards would fall in a fraction of a cache's sets", lines)
	}
	line := func(off uintptr) uintptr { return off / cacheLine }
	if got := line(unsafe.Offsetof(sh.closed)); got != 0 {
		t.Errorf("the lock's line ends before the memo and closed do: closed is on line %d", got)
	}
	for name, off := range map[string]uintptr{"slots": unsafe.Offsetof(sh.slots), "arena": unsafe.Offsetof(sh.arena), "seed": unsafe.Offsetof(sh.seed), "view": unsafe.Offsetof(sh.view), "denying": unsafe.Offsetof(sh.denying)} {
		if got := line(off); got != 1 {
			t.Errorf("shard.%s is on line %d, want 1 (read by every decision, written only when the index or arena is replaced or the denial hint changes)", name, got)
		}
	}
	if got := line(unsafe.Offsetof(sh.held)); got != 2 {
		t.Errorf("shard.held is on line %d, want 2 (written when keys come and go)", got)
	}
	if got := line(unsafe.Offsetof(sh.count)); got != 2 {
		t.Errorf("shard.count is on line %d, want 2 (written when keys come and go)", got)
	}

	var s Table
	readEnd := unsafe.Offsetof(s.done) + unsafe.Sizeof(s.done)
	if gap := unsafe.Offsetof(s.keys) - readEnd; gap < cacheLine-8 {
		t.Errorf("the Table's counters start %d bytes after its read-only fields, want at least %d", gap, cacheLine-8)
	}
	if start := unsafe.Offsetof(s.shards); start < cacheLine-8 {
		t.Errorf("the Table's read-only fields start at %d, want at least %d: another object's writes could share their line", start, cacheLine-8)
	}
}
