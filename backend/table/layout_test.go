package table

import (
	"testing"
	"unsafe"
)

// TestLayout checks the cache-line layout the decision path relies on: a
// shard is a whole number of lines, the fields a decision without the
// shard's lock reads (seq, seed, view) lie on its first line, which holds
// nothing a decision writes, and the Table's counters sit a full line away
// from the shards and mask every call reads.
func TestLayout(t *testing.T) {
	var sh shard
	if n := unsafe.Sizeof(sh); n%cacheLine != 0 {
		t.Errorf("a shard is %d bytes, not a whole number of %d-byte lines: neighbouring shards would share one", n, cacheLine)
	}
	line := func(off uintptr) uintptr { return off / cacheLine }
	for name, off := range map[string]uintptr{"seq": unsafe.Offsetof(sh.seq), "seed": unsafe.Offsetof(sh.seed), "view": unsafe.Offsetof(sh.view) + unsafe.Sizeof(sh.view) - 1} {
		if got := line(off); got != 0 {
			t.Errorf("shard.%s is on line %d, want 0 (the line every decision reads)", name, got)
		}
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
