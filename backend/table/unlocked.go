package table

import (
	"encoding/binary"
	"sync/atomic"
)

// Reading without the lock: a decision that finds its caller denied writes
// nothing, so it need not take the shard's lock, whose line every lock
// and unlock writes and which two cores deciding different keys of one
// shard would otherwise pass between them. ReadUnlocked copies the key's
// record between two reads of the shard's seq (a sequence lock): the same
// even value both times means no holder of the lock came in between, and
// the copy is whole. Any doubt (the lock held, the index or arena being
// replaced, a length out of bounds, an expired or absent record) sends the
// caller to the lock, which decides as before.
//
// Only on amd64, whose loads are not reordered with other loads and whose
// stores are seen in the order they were made, so that neither the reader
// nor the lock's holder needs a fence Go cannot express; and not under the
// race detector, to which the plain reads of bytes a holder of the lock may
// be writing are a race by design. UnlockedReads reports whether this build
// has them.

// UnlockedReads reports whether ReadUnlocked can succeed in this build:
// true on amd64 without the race detector. Elsewhere it always reports
// false and every decision takes the shard's lock.
const UnlockedReads = unlockedReads

// MaxUnlocked is the largest record ReadUnlocked copies: records of the
// fixed-size algorithms, with room to spare. Larger ones (a sliding log's)
// are read under the lock.
const MaxUnlocked = 48

// ReadUnlocked copies the record of key, of hash backend.Hash(key), into
// buf without taking the shard's lock and returns it with the record's
// expiry (zero: never). It reports false, having read nothing the caller
// may use, when the record must be read under the lock instead: the key
// has no live record at now, the record is longer than buf or its key 128
// bytes or more, the shard was being written or is closed, or this build
// reads nothing without the lock (UnlockedReads). The copy is the record
// as it was at one instant during the call.
func (s *Table) ReadUnlocked(hash uint64, key, buf []byte, now int64) (record []byte, expiresAt int64, ok bool) {
	if !unlockedReads {
		return nil, 0, false
	}
	sh := &s.shards[hash&s.mask]
	q := atomic.LoadUint64(&sh.seq)
	v := sh.view.Load()
	if q&1 != 0 || v == nil {
		return nil, 0, false
	}
	slots, a := v.slots, v.arena
	n := len(slots)
	fp := uint32(hash >> 32)
	klen := uint32(len(key))
	if n == 0 || klen >= 0x80 {
		return nil, 0, false
	}
	// The index and the arena may be changing under this read: every
	// length is checked against the view's bounds before it is used, and
	// the probe ends after one pass.
	for i, left := home(fp, sh.seed, n), n; left > 0; left-- {
		sl := slots[i]
		if sl == 0 {
			return nil, 0, false
		}
		if uint32(sl>>32) == fp {
			off := uint32(sl)
			p := uint64(off) + 11
			if p+uint64(klen) > uint64(len(a)) {
				return nil, 0, false
			}
			// One byte each: klen is under 0x80, and a vcap of 0x80 or
			// more (a longer header) is refused below.
			hk, vcap, vlen := uint32(a[off+8]), uint32(a[off+9]), uint32(a[off+10])
			if hk == klen && sameKey(a[p:p+uint64(klen)], key) {
				val := uint32(p) + klen
				e := int64(binary.LittleEndian.Uint64(a[off:]))
				if vcap >= 0x80 || vlen > vcap || int(vlen) > len(buf) || uint64(val)+uint64(vlen) > uint64(len(a)) || expired(e, now) {
					return nil, 0, false
				}
				record = buf[:vlen]
				copy(record, a[val:val+vlen])
				if atomic.LoadUint64(&sh.seq) != q {
					return nil, 0, false
				}
				return record, e, true
			}
		}
		if i++; i == n {
			i = 0
		}
	}
	return nil, 0, false
}

// Denying reports the hint of the shard of hash: whether the last decision
// to change it found its caller denied (SetDenying). A decider reads
// without the lock where it expects a denial, and takes the lock at once
// where it expects to spend.
func (s *Table) Denying(hash uint64) bool { return s.shards[hash&s.mask].denying.Load() }

// SetDenying sets the hint Denying reports for the shard of hash. It
// stores only a change, so that a run of decisions of one kind leaves the
// hint's line unwritten.
func (s *Table) SetDenying(hash uint64, denying bool) {
	if d := &s.shards[hash&s.mask].denying; d.Load() != denying {
		d.Store(denying)
	}
}
