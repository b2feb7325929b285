package table

import (
	"encoding/binary"
	"sync/atomic"
)

// The decision path without the shard lock. A decision on a key the table
// already holds, the common case, takes only the lock inside the key's own
// entry (lockBit, in the entry's hi expiry word) and writes nothing but that
// entry: its record, and its expiry, which the release of the lock stores.
// Two decisions on different keys then share no line they write, while
// through the shard's mutex every decision wrote the shard's first line.
//
// LockEntry reads seq, then the view (index and arena, published together),
// probes the index with atomic loads, compares the key (its bytes never
// change once its slot is stored), takes the entry's lock by a
// compare-and-swap and reads seq again: unchanged, no holder of the shard
// has come or gone since before the probe, so the entry found is the key's,
// and any holder that comes now waits for the entry (settle) before it
// touches it. Changed, or odd at the start, the decision lets go and takes
// the shard's lock instead, as it does for a key the table does not hold
// yet, whose insertion changes the index.

// Entry is a key's entry held by its own lock (LockEntry), for a decision
// made without the shard's lock. Its record is stepped where it lies and
// written back with Commit, or left with Unlock; until one of them, no
// other decision on the key proceeds and no holder of the key's shard
// reads the entry. The zero Entry is not held.
type Entry struct {
	a         []byte // the arena the entry lies in
	off, val  uint32 // the entry, and its value
	n, vcap   uint32 // the value's length and reserve
	expiresAt int64  // the entry's expiry, as Unlock will store it
}

// maxEntryValue is the largest value reserve LockEntry takes: a record of
// one of the fixed-size algorithms with room to spare. Larger records (a
// sliding log's) are decided under the shard's lock.
const maxEntryValue = 64

// LockEntry finds key's entry, of hash backend.Hash(key), without the
// shard's lock, takes the entry's own lock and returns it. (By value: the
// caller keeps it on its stack, which a write through a pointer could not
// tell, and would pay a write barrier for while the collector runs.) It
// reports false, holding nothing, when the decision should take the
// shard's lock instead: the table does not hold key (its first record is an
// insertion), the shard is held or changed while it looked, the key is 128
// bytes or more, the value's reserve is over 64 bytes, or the table is
// closed.
func (s *Table) LockEntry(hash uint64, key []byte) (e Entry, ok bool) {
	sh := &s.shards[hash&s.mask]
	q := sh.seq.Load()
	v := sh.view.Load()
	if q&1 != 0 || v == nil || len(key) >= 0x80 {
		return e, false
	}
	slots, a := v.slots, v.arena
	n := len(slots)
	fp := uint32(hash >> 32)
	klen := len(key)
	i := home(fp, sh.seed, n)
	for range n {
		sl := atomic.LoadUint64(&slots[i])
		if sl == 0 {
			return e, false
		}
		if uint32(sl>>32) == fp {
			// A slot stored after the arena was reallocated points past the
			// view's arena, or at bytes of it never written (zeros: no key).
			off := int(uint32(sl))
			p := off + 11
			if p+klen > len(a) || a[off+9] > maxEntryValue {
				return e, false
			}
			if int(a[off+8]) == klen && sameKey(a[p:p+klen], key) {
				// The key's entry: take its lock, then check that no
				// holder of the shard came (or went) since seq was read.
				w := hiWord(a, uint32(off))
				var hi uint32
				for spin := 0; ; spin++ {
					hi = atomic.LoadUint32(w)
					if hi&lockBit == 0 && atomic.CompareAndSwapUint32(w, hi, hi|lockBit) {
						break
					}
					pause(spin)
				}
				if sh.seq.Load() != q {
					atomic.StoreUint32(w, hi)
					return e, false
				}
				return Entry{
					a:         a,
					off:       uint32(off),
					val:       uint32(p + klen),
					n:         uint32(a[off+10]),
					vcap:      uint32(a[off+9]),
					expiresAt: int64(uint64(hi)<<32 | uint64(binary.NativeEndian.Uint32(a[off:]))),
				}, true
			}
		}
		if i++; i == n {
			i = 0
		}
	}
	return e, false
}

// Record returns the entry's record, aliasing the stored bytes, to be
// stepped in place; when it has expired at now, an empty slice whose
// capacity is the entry's reserve, so that a new record is built there. Its
// capacity is the reserve either way: a record that grows within it stays
// in place.
func (e *Entry) Record(now int64) []byte {
	if expired(e.expiresAt, now) {
		return e.a[e.val : e.val : e.val+e.vcap]
	}
	return e.a[e.val : e.val+e.n : e.val+e.vcap]
}

// Commit writes record, which may be the slice Record returned stepped in
// place, as the entry's record with expiresAt (zero or less: never), lets go
// of the entry and reports true. When record does not fit the entry's
// reserve or is empty, it writes nothing and reports false, still holding
// the entry: a record larger than the reserve was built elsewhere, so the
// entry is unchanged, and the caller unlocks it and writes under the
// shard's lock.
func (e *Entry) Commit(record []byte, expiresAt int64) bool {
	if uint32(len(record)) != e.n || len(record) == 0 || &record[0] != &e.a[e.val] {
		return e.commitOther(record, expiresAt)
	}
	// Stepped in place, its length unchanged: the common case.
	e.expiresAt = expiresAt
	e.Unlock()
	return true
}

// commitOther is Commit for a record of another length, or built elsewhere.
func (e *Entry) commitOther(record []byte, expiresAt int64) bool {
	n := uint32(len(record))
	if n > e.vcap || n == 0 {
		return false
	}
	if &record[0] != &e.a[e.val] {
		copy(e.a[e.val:e.val+n], record)
	}
	if n != e.n {
		e.a[e.off+10] = byte(n) // one byte wide: the reserve is under 128
	}
	e.expiresAt = expiresAt
	e.Unlock()
	return true
}

// Extend lengthens the entry's expiry to expiresAt when the entry is live
// at now and would expire before then, as ExtendLocked does; Unlock
// stores it.
func (e *Entry) Extend(now, expiresAt int64) {
	if x := e.expiresAt; x > 0 && x > now && x < expiresAt {
		e.expiresAt = expiresAt
	}
}

// Unlock lets go of the entry, storing its expiry.
func (e *Entry) Unlock() {
	x := uint64(max(e.expiresAt, 0))
	binary.NativeEndian.PutUint32(e.a[e.off:], uint32(x))
	atomic.StoreUint32(hiWord(e.a, e.off), uint32(x>>32))
}
