package table

import (
	"encoding/binary"
	"math"
	"sync"
	"sync/atomic"
)

// This file holds one shard's data structures: the arena of entries and the
// open-addressing index over it. Nothing here locks; every function expects
// the caller to hold shard.mu.

const (
	// minSlots is the smallest index a shard with keys allocates.
	minSlots = 16
	// compactMinDead is the number of dead arena bytes below which a shard is
	// never compacted, however small its arena.
	compactMinDead = 4 << 10
	// maxArena bounds a shard's arena: offsets are 32 bits.
	maxArena = math.MaxUint32
	// maxLen bounds a key's or value's length.
	maxLen = 1 << 30
)

// shard is one partition of the table: a lock, an index and an arena.
//
// The index, slots, is a linear-probing hash table of uint64 slots. A slot
// is fp<<32 | off, where fp is the high 32 bits of the key's 64-bit hash
// and off the offset of the key's entry in the arena; zero marks an empty
// slot (off is never zero: arena[0] is a pad byte). A key's home slot is
// derived from fp alone, seeded, so the index can be resized without
// reading the arena or rehashing keys. Two keys with the same fp (or the
// same full hash) simply occupy two slots: every probe that matches fp
// compares the full key stored in the arena, so no key is ever mistaken
// for another.
//
// Deletion shifts later slots of the probe run backwards (no tombstones),
// so a lookup's cost depends only on the live keys.
type shard struct {
	// The fields are grouped by cache line, by how often a decision writes
	// them: when two cores take turns at a shard, only a line written
	// since the other last read it has to move between them. A shard is
	// three lines: an odd number, so that the same line of consecutive
	// shards falls in every set of a cache rather than in a few.

	// Written by every call that takes the lock: the lock, its sequence
	// and the memo of the hot entry.
	mu sync.Mutex // guards every field below but seq, view, denying and held

	// seq is odd while the lock is held and even while it is not: lock
	// and unlock each add one. A reader that takes no lock (ReadUnlocked)
	// reads it, atomically, before and after reading an entry; the same
	// even value both times means no holder of the lock came in between,
	// so the bytes it read were whole. The holder writes it with plain
	// stores, which Go's compiler keeps in program order and amd64 makes
	// visible in that order: the only build with such readers (see
	// unlocked.go). An atomic store would cost every locked call a
	// locked instruction more.
	seq uint64

	// The engine reads a record with GetLocked and writes it back with
	// PutLocked at once, and a hot key comes back again and again.
	// GetLocked remembers the entry it found so that the PutLocked and
	// the next GetLocked of the same key skip the probe. gen changes
	// whenever a slot moves or an entry's offset or header changes, which
	// invalidates the memo; the key is still compared.
	gen     uint64 // bumped by every structural change
	hotGen  uint64 // gen when the hot entry was found
	hotSlot uint32 // its slot
	hotOff  uint32 // its offset
	hotVal  uint32 // the offset of its value
	hotVlen uint32 // its value length
	hotVcap uint32 // its value reserve
	hotFP   uint32 // its fingerprint
	hotKlen uint32 // its key length
	closed  bool   // set by Close; every method then returns ErrClosed

	// Read by every call, written only when the index or arena is
	// reallocated (or the hint changes).
	slots []uint64 // the index; nil when count is zero
	arena []byte   // the entries; nil when count is zero
	// view is slots and arena (to its capacity) for readers that take no
	// lock, published whenever either is reallocated; nil when the shard
	// holds nothing.
	view atomic.Pointer[view]
	seed uint32 // mixes fp into a home slot; fixed for the table's life
	// denying is set when a decision under the lock denies and cleared
	// when one spends (see engine's decideMemory): a hint of which way to
	// decide the shard's next key, stored only when it changes, so that a
	// run of decisions of one kind leaves the line unwritten.
	denying atomic.Bool

	// Written when keys come and go.
	count  int    // live slots (keys held, expired or not)
	dead   uint32 // bytes of arena held by replaced or deleted entries
	cursor uint32 // next slot the sweeper examines
	now    int64  // latest now passed to a read; used to reclaim when full
	// held is count, stored at each change, so that Len reads every
	// shard's without its lock: per-shard counts summed on read, rather
	// than one counter that every new key in every shard would write.
	held atomic.Int64

	// Room for a key's first record, which LookupLocked lends and the
	// table copies from.
	scratch [32]byte
}

// view is a shard's index and arena as a reader without the lock sees
// them: published together, so that such a reader never pairs one
// allocation's pointer with another's length.
type view struct {
	slots []uint64
	arena []byte
}

// lock takes the shard's lock and makes seq odd.
func (sh *shard) lock() {
	sh.mu.Lock()
	sh.seq++
}

// unlock makes seq even and releases the shard's lock.
func (sh *shard) unlock() {
	sh.seq++
	sh.mu.Unlock()
}

// publish makes the shard's current index and arena the view readers
// without the lock use. Every reallocation of either calls it.
func (sh *shard) publish() {
	if sh.slots == nil {
		sh.view.Store(nil)
		return
	}
	sh.view.Store(&view{slots: sh.slots, arena: sh.arena[:cap(sh.arena)]})
}

// isHot reports whether key is the entry the last GetLocked found and
// nothing has moved since.
// The fingerprint and generation are compared inline, so that a lookup of
// another key, the common case over many keys, costs no call.
func (sh *shard) isHot(fp uint32, key []byte) bool {
	return sh.hotGen == sh.gen && sh.hotFP == fp && sh.isHotKey(key)
}

// isHotKey reports whether key is the hot entry's key. It is not inlined,
// so that isHot is.
//
//go:noinline
func (sh *shard) isHotKey(key []byte) bool {
	return int(sh.hotKlen) == len(key) && sameKey(sh.arena[sh.hotVal-sh.hotKlen:sh.hotVal], key)
}

// isHotWrite is isHot for PutLocked writing value under key. A value that
// aliases the hot entry's own value bytes was read from that entry by
// GetLocked for key (the caller's contract), so the key's bytes need not be
// compared again; its fingerprint and length still are.
func (sh *shard) isHotWrite(fp uint32, key, value []byte) bool {
	if sh.hotGen != sh.gen || sh.hotFP != fp || int(sh.hotKlen) != len(key) {
		return false
	}
	if len(value) > 0 && int(sh.hotVal) < len(sh.arena) && &value[0] == &sh.arena[sh.hotVal] {
		return true
	}
	return string(sh.arena[sh.hotVal-sh.hotKlen:sh.hotVal]) == string(key)
}

// entry layout: [expiresAt int64 LE][uvarint klen][uvarint vcap]
// [uvarint vlen, padded to the width of vcap][key][value, vcap bytes].

// uvarintLen returns the number of bytes the uvarint encoding of x takes.
func uvarintLen(x uint32) uint32 {
	n := uint32(1)
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// putUvarintWidth writes x as a uvarint of exactly w bytes (padding with
// continuation bytes, which decoders accept), so a value length can be
// rewritten in place without moving the key and value.
func putUvarintWidth(b []byte, x uint32, w uint32) {
	for i := uint32(0); i < w-1; i++ {
		b[i] = byte(x) | 0x80
		x >>= 7
	}
	b[w-1] = byte(x)
}

// uvarintAt decodes the uvarint at a[p] and returns it and the offset just
// past it. Lengths are written by this package, so the input is trusted.
func uvarintAt(a []byte, p uint32) (uint32, uint32) {
	b := a[p]
	if b < 0x80 {
		return uint32(b), p + 1
	}
	x := uint32(b & 0x7f)
	s := uint(7)
	for {
		p++
		b = a[p]
		if b < 0x80 {
			return x | uint32(b)<<s, p + 1
		}
		x |= uint32(b&0x7f) << s
		s += 7
	}
}

// entrySize returns the arena bytes of an entry with the given lengths.
func entrySize(klen, vcap uint32) int {
	return 8 + int(uvarintLen(klen)) + 2*int(uvarintLen(vcap)) + int(klen) + int(vcap)
}

// fmix32 is MurmurHash3's finaliser: a bijection that spreads every input
// bit over the output.
func fmix32(h uint32) uint32 {
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// home returns the home slot of fp in an index of n slots.
func home(fp, seed uint32, n int) int {
	return int((uint64(fmix32(fp^seed)) * uint64(n)) >> 32)
}

// find looks key up. When found, it returns the key's slot, the offset of
// its entry, of its value, the value's length and reserve, and true. (Plain
// results rather than a struct, which the compiler would copy through the
// stack on the hot path.) When not found, slot is the empty slot where key
// would be inserted (-1 when the index is not allocated) and ok is false.
func (sh *shard) find(fp uint32, key []byte) (slot int, off, val, vlen, vcap uint32, ok bool) {
	slots := sh.slots
	n := len(slots)
	if n == 0 {
		return -1, 0, 0, 0, 0, false
	}
	i := home(fp, sh.seed, n)
	for {
		s := slots[i]
		if s == 0 {
			return i, 0, 0, 0, 0, false
		}
		if uint32(s>>32) == fp {
			off := uint32(s)
			a := sh.arena
			klen, p := uvarintAt(a, off+8)
			vcap, p := uvarintAt(a, p)
			vlen, p := uvarintAt(a, p)
			if int(klen) == len(key) && string(a[p:p+klen]) == string(key) {
				return i, off, p + klen, vlen, vcap, true
			}
		}
		i++
		if i == n {
			i = 0
		}
	}
}

// lookup is find for a caller that only reads or rewrites the key's entry
// in place: it returns the offsets of the entry and of its value, the
// value's length, and whether the key was found.
func (sh *shard) lookup(fp uint32, key []byte) (slot int, off, val, vlen, vcap uint32, ok bool) {
	slots := sh.slots
	n := len(slots)
	if n == 0 {
		return 0, 0, 0, 0, 0, false
	}
	a := sh.arena
	for i := home(fp, sh.seed, n); ; {
		s := slots[i]
		if s == 0 {
			return 0, 0, 0, 0, 0, false
		}
		if uint32(s>>32) == fp {
			off := uint32(s)
			// The three lengths are one byte each unless the key or the
			// value is 128 bytes or more.
			p := off + 8
			klen, vcap, vlen := uint32(a[p]), uint32(a[p+1]), uint32(a[p+2])
			if klen|vcap|vlen >= 0x80 {
				klen, p = uvarintAt(a, p)
				vcap, p = uvarintAt(a, p)
				vlen, p = uvarintAt(a, p)
			} else {
				p += 3
			}
			if int(klen) == len(key) && sameKey(a[p:p+klen], key) {
				return i, off, p + klen, vlen, vcap, true
			}
		}
		if i++; i == n {
			i = 0
		}
	}
}

// sameKey reports whether a and b, of the same length, hold the same bytes.
// A key of 8 to 32 bytes is compared in at most four 8-byte loads on each
// side (the last overlapping), without a call; others through the runtime.
func sameKey(a, b []byte) bool {
	n := len(b)
	if len(a) != n {
		return false
	}
	if n < 8 || n > 32 {
		return string(a) == string(b)
	}
	x := binary.LittleEndian.Uint64(a[n-8:]) ^ binary.LittleEndian.Uint64(b[n-8:])
	x |= binary.LittleEndian.Uint64(a[:8]) ^ binary.LittleEndian.Uint64(b[:8])
	if n > 16 {
		x |= binary.LittleEndian.Uint64(a[8:16]) ^ binary.LittleEndian.Uint64(b[8:16])
		if n > 24 {
			x |= binary.LittleEndian.Uint64(a[16:24]) ^ binary.LittleEndian.Uint64(b[16:24])
		}
	}
	return x == 0
}

// expiresAt returns the expiry of the entry at off.
func (sh *shard) expiresAt(off uint32) int64 {
	return int64(binary.LittleEndian.Uint64(sh.arena[off:]))
}

// extend sets the expiry of the entry at off to expiresAt when the entry is
// live at now and expires before then, and reports whether it did. An
// entry that never expires (expiry 0) is left so.
func (sh *shard) extend(off uint32, now, expiresAt int64) bool {
	e := sh.expiresAt(off)
	if e <= 0 || e <= now || e >= expiresAt {
		return false
	}
	binary.LittleEndian.PutUint64(sh.arena[off:], uint64(expiresAt))
	return true
}

// expired reports whether an entry with expiry e is expired at now.
func expired(e, now int64) bool {
	return e > 0 && e <= now
}

// appendEntry writes a new entry at the end of the arena, reserving vcap
// bytes for the value, and returns its offset. It grows the arena by a
// quarter at a time (not Go's doubling), an eighth once it passes 64 KiB, to
// keep the slack per key small; the copying that costs stays amortised O(1).
func (sh *shard) appendEntry(key, value []byte, expiresAt int64, vcap uint32) (uint32, error) {
	klen := uint32(len(key))
	vlen := uint32(len(value))
	need := entrySize(klen, vcap)
	a := sh.arena
	if len(a) == 0 {
		need++ // the pad byte that keeps offsets non-zero
	}
	if uint64(len(a))+uint64(need) > maxArena {
		return 0, ErrTooLarge
	}
	if len(a)+need > cap(a) {
		c := cap(a) + cap(a)/4
		if cap(a) >= 64<<10 {
			c = cap(a) + cap(a)/8
		}
		if c < len(a)+need {
			c = len(a) + need
		}
		if c < 256 {
			c = 256
		}
		if c > maxArena {
			c = maxArena
		}
		na := make([]byte, len(a), c)
		copy(na, a)
		a = na
	}
	if len(a) == 0 {
		a = a[:1]
	}
	off := uint32(len(a))
	a = binary.LittleEndian.AppendUint64(a, uint64(expiresAt))
	a = binary.AppendUvarint(a, uint64(klen))
	a = binary.AppendUvarint(a, uint64(vcap))
	w := uvarintLen(vcap)
	p := len(a)
	a = a[:p+int(w)]
	putUvarintWidth(a[p:], vlen, w)
	a = append(a, key...)
	p = len(a)
	a = a[:p+int(vcap)]
	copy(a[p:], value)
	grown := cap(a) != cap(sh.arena)
	sh.arena = a
	if grown {
		sh.publish()
	}
	return off, nil
}

// removeSlot empties slot i and shifts the rest of its probe run back so
// that every key stays reachable from its home slot. It updates count and
// dead but does not compact or resize: callers call tidy afterwards.
func (sh *shard) removeSlot(i int) {
	slots := sh.slots
	n := len(slots)
	off := uint32(slots[i])
	klen, p := uvarintAt(sh.arena, off+8)
	vcap, _ := uvarintAt(sh.arena, p)
	sh.dead += uint32(entrySize(klen, vcap))
	sh.count--
	sh.held.Store(int64(sh.count))
	sh.gen++

	j := i
	for {
		j++
		if j == n {
			j = 0
		}
		s := slots[j]
		if s == 0 {
			break
		}
		k := home(uint32(s>>32), sh.seed, n)
		// The key at j may move to i only if its home k is not in the
		// cyclic interval (i, j].
		if i <= j {
			if i < k && k <= j {
				continue
			}
		} else if i < k || k <= j {
			continue
		}
		slots[i] = s
		i = j
	}
	slots[i] = 0
}

// insertSlot puts s into the index, which must have a free slot.
func insertSlot(slots []uint64, s uint64, seed uint32) {
	n := len(slots)
	i := home(uint32(s>>32), seed, n)
	for slots[i] != 0 {
		i++
		if i == n {
			i = 0
		}
	}
	slots[i] = s
}

// resize rebuilds the index with n slots. Home slots depend on fp only, so
// no key is read or hashed.
func (sh *shard) resize(n int) {
	old := sh.slots
	slots := make([]uint64, n)
	for _, s := range old {
		if s != 0 {
			insertSlot(slots, s, sh.seed)
		}
	}
	if len(old) > 0 {
		sh.cursor = uint32(uint64(sh.cursor) * uint64(n) / uint64(len(old)))
	} else {
		sh.cursor = 0
	}
	sh.slots = slots
	sh.gen++
	sh.publish()
}

// needGrow reports whether adding one key would push the index's load
// above 4/5.
func (sh *shard) needGrow() bool {
	return (sh.count+1)*5 > len(sh.slots)*4
}

// grow makes room for one more key: it allocates the index or enlarges it
// by half.
func (sh *shard) grow() {
	n := len(sh.slots) + len(sh.slots)/2
	if n < minSlots {
		n = minSlots
	}
	sh.resize(n)
}

// tidy restores sh's bounds after removals or relocations: an empty shard
// releases its memory, an index below 1/5 load shrinks to 1/2, and an arena
// more than half dead (and holding more than s.minDead dead bytes) is
// compacted.
func (s *Table) tidy(sh *shard) {
	if sh.count == 0 {
		sh.slots, sh.arena, sh.dead, sh.cursor = nil, nil, 0, 0
		sh.gen++
		sh.publish()
		return
	}
	if n := len(sh.slots); n > minSlots && sh.count*5 < n {
		sh.resize(max(minSlots, sh.count*2))
	}
	if int(sh.dead) > s.minDead && int(sh.dead)*2 > len(sh.arena) {
		sh.compact()
		s.compactions.Add(1)
	}
}

// compact copies the live entries into a new arena, in index order, and
// trims each value's reserve to its length. Slots keep their positions, so
// the sweeper's cursor stays valid. The work is bounded by the shard's size.
func (sh *shard) compact() {
	old := sh.arena
	live := len(old) - 1 - int(sh.dead)
	a := make([]byte, 1, 1+live)
	for i, s := range sh.slots {
		if s == 0 {
			continue
		}
		off := uint32(s)
		klen, p := uvarintAt(old, off+8)
		_, p = uvarintAt(old, p)
		vlen, p := uvarintAt(old, p)
		noff := len(a)
		a = append(a, old[off:off+8]...)
		a = binary.AppendUvarint(a, uint64(klen))
		a = binary.AppendUvarint(a, uint64(vlen))
		a = binary.AppendUvarint(a, uint64(vlen))
		a = append(a, old[p:p+klen+vlen]...)
		sh.slots[i] = s&^math.MaxUint32 | uint64(noff)
	}
	sh.arena = a
	sh.dead = 0
	sh.gen++
	sh.publish()
}

// sweep examines up to limit keys from the cursor and removes those expired
// at now, visiting each slot at most once. It returns the keys examined
// and removed. It does not tidy.
func (sh *shard) sweep(now int64, limit int) (examined, removed int) {
	n := len(sh.slots)
	if sh.count == 0 || n == 0 || limit <= 0 {
		return 0, 0
	}
	c := int(sh.cursor)
	if c >= n {
		c = 0
	}
	// Advance over at most one pass of the index, and at most 8 slots per
	// key allowed, so a sparse index cannot stretch the lock hold. A
	// removal shifts the next key of the run into c, so c is looked at
	// again without advancing.
	steps := min(n, 8*limit)
	for advanced := 0; advanced < steps && examined < limit; {
		if s := sh.slots[c]; s != 0 {
			examined++
			if expired(sh.expiresAt(uint32(s)), now) {
				sh.removeSlot(c)
				removed++
				continue
			}
		}
		c++
		if c == n {
			c = 0
		}
		advanced++
	}
	sh.cursor = uint32(c)
	return examined, removed
}
