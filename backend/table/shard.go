package table

import (
	"encoding/binary"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// This file holds one shard's data structures: the arena of entries and the
// open-addressing index over it, and the lock word inside each entry. Every
// function here but those of the entry lock expects the caller to hold the
// shard with lock (shard.mu, and seq odd).

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
// slot (off is never zero: the arena starts with a pad word). A key's home
// slot is derived from fp alone, seeded, so the index can be resized
// without reading the arena or rehashing keys. Two keys with the same fp
// (or the same full hash) simply occupy two slots: every probe that matches
// fp compares the full key stored in the arena, so no key is ever mistaken
// for another.
//
// Deletion shifts later slots of the probe run backwards (no tombstones),
// so a lookup's cost depends only on the live keys.
//
// Two kinds of callers use a shard. A caller holding the shard (lock) may
// read and change everything; it makes seq odd for as long as it holds it.
// A decision on a key already held (LockEntry) takes no shard lock: it
// reads the index and the arena through view, takes the entry's own lock
// (a bit of its expiry word, see lockBit) and checks that seq has not moved
// since before it read the index; it then writes only that entry. A holder
// of the shard waits for an entry's lock to be free (settle) before it
// reads or writes the entry's value, length or expiry, and writes its
// expiry under that lock; a decision that takes the entry's lock after that
// finds seq moved and lets go without touching it.
type shard struct {
	// Read by every decision; written only by holders of the shard, which
	// a decision on a key already held never is: this line is shared by
	// every core, not passed between them.
	mu   sync.Mutex           // guards every field below but seq, view, seed and held
	seq  atomic.Uint32        // odd while the shard is held: see lock
	seed uint32               // mixes fp into a home slot; fixed for the table's life
	view atomic.Pointer[view] // slots and arena as LockEntry reads them; nil when none
	// held is count, stored at each change, so that Len reads every
	// shard's without its lock: per-shard counts summed on read, rather
	// than one counter that every new key in every shard would write.
	held atomic.Int64

	// A caller holding the shard reads a record with GetLocked and writes
	// it back with PutLocked at once, and a hot key comes back again and
	// again. GetLocked remembers the entry it found so that the PutLocked
	// and the next GetLocked of the same key skip the probe. gen changes
	// whenever a slot moves or an entry's offset changes, which invalidates
	// the memo; the key is still compared. The value's length is not
	// remembered: a decision may change it in place.
	gen     uint64 // bumped by every structural change
	hotGen  uint64 // gen when the hot entry was found
	hotSlot uint32 // its slot
	hotOff  uint32 // its offset
	hotVal  uint32 // the offset of its value
	hotVcap uint32 // its value reserve
	hotFP   uint32 // its fingerprint
	hotKlen uint32 // its key length

	// Written only by holders of the shard.
	slots  []uint64 // the index; nil when count is zero
	arena  []byte   // the entries; nil when count is zero
	count  int      // live slots (keys held, expired or not)
	dead   int      // bytes of arena held by replaced or deleted entries
	cursor int      // next slot the sweeper examines
	now    int64    // latest now passed to a read; used to reclaim when full
	closed bool     // set by Close; every method then returns ErrClosed

	// Room for a key's first record, which LookupLocked lends and the
	// table copies from; it also pads the shard to 192 bytes, so no two
	// shards share a cache line.
	scratch [32]byte
}

// view is the index and the arena as a decision without the shard lock
// reads them: published (a new view) whenever either is reallocated, so
// that the two always belong together. arena is the whole allocation, to
// its capacity: entries appended after the view was published lie in it,
// and their slots are stored only once they are written.
type view struct {
	slots []uint64
	arena []byte
}

// lock takes the shard for its caller: its mutex, then seq made odd, so
// that a decision that took an entry's lock without it finds out.
func (sh *shard) lock() {
	sh.mu.Lock()
	sh.seq.Add(1)
}

// unlock releases the shard: seq made even again, then its mutex.
func (sh *shard) unlock() {
	sh.seq.Add(1)
	sh.mu.Unlock()
}

// publish stores the view of the current index and arena, after either was
// reallocated or released.
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

// entry layout: [expiry lo uint32][expiry hi uint32, lockBit][uvarint klen]
// [uvarint vcap][uvarint vlen, padded to the width of vcap][key]
// [value, vcap bytes]. The two expiry words are in the machine's byte order
// (the arena never leaves the process) and every entry starts at a multiple
// of 4, so that hi can be locked with a 32-bit compare-and-swap: vcap is
// rounded up until the entry's size is a multiple of 4 (roomFor).

// lockBit is the bit of an entry's hi expiry word that is its lock: a
// stored expiry is never negative (zero means never), so the bit is free.
const lockBit = 1 << 31

// arenaPad is the bytes before the first entry, so that no entry is at
// offset 0 (an empty slot) and every entry is 4-aligned.
const arenaPad = 4

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

// roomFor returns the value reserve of an entry with a klen-byte key and
// room for at least n bytes of value: n, rounded up so that the entry's
// size is a multiple of 4.
func roomFor(klen, n uint32) uint32 {
	for entrySize(klen, n)%4 != 0 {
		n++
	}
	return n
}

// hiWord returns the entry at off's hi expiry word, which holds its lock.
func hiWord(a []byte, off uint32) *uint32 {
	return (*uint32)(unsafe.Pointer(&a[off+4]))
}

// pause is one turn of waiting for an entry's lock, which a decision holds
// for the length of one step: a few turns spinning, then yielding, so that
// a holder that was descheduled gets to run.
func pause(spin int) {
	if spin >= 16 {
		runtime.Gosched()
	}
}

// settle waits until no decision holds the entry at off and returns its hi
// expiry word. A caller holding the shard calls it before it reads or
// writes the entry's value, length or expiry: a decision that takes the
// entry's lock afterwards finds seq moved and lets go without touching them.
func (sh *shard) settle(off uint32) uint32 {
	w := hiWord(sh.arena, off)
	for spin := 0; ; spin++ {
		if hi := atomic.LoadUint32(w); hi&lockBit == 0 {
			return hi
		}
		pause(spin)
	}
}

// setExpiry writes e (zero for a negative e: never) as the expiry of the
// entry at off, for a caller holding the shard: under the entry's lock, as
// a decision letting go of it may write the word back meanwhile.
func setExpiry(a []byte, off uint32, e int64) {
	e = max(e, 0)
	w := hiWord(a, off)
	for spin := 0; ; spin++ {
		hi := atomic.LoadUint32(w)
		if hi&lockBit == 0 && atomic.CompareAndSwapUint32(w, hi, hi|lockBit) {
			break
		}
		pause(spin)
	}
	binary.NativeEndian.PutUint32(a[off:], uint32(e))
	atomic.StoreUint32(w, uint32(uint64(e)>>32))
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
// its entry, of its value, the value's length and reserve, and true, with
// the entry settled (see settle). (Plain results rather than a struct,
// which the compiler would copy through the stack on the hot path.) When
// not found, slot is the empty slot where key would be inserted (-1 when
// the index is not allocated) and ok is false.
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
			w := uvarintLen(vcap) // vlen's width, which a decision may rewrite: read once settled
			if int(klen) == len(key) && string(a[p+w:p+w+klen]) == string(key) {
				sh.settle(off)
				vlen, _ := uvarintAt(a, p)
				return i, off, p + w + klen, vlen, vcap, true
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
// value's length, and whether the key was found, with the entry settled.
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
			klen, vcap := uint32(a[p]), uint32(a[p+1])
			q := p + 3
			if klen|vcap >= 0x80 {
				klen, q = uvarintAt(a, p)
				vcap, q = uvarintAt(a, q)
				q += uvarintLen(vcap)
			}
			if int(klen) == len(key) && sameKey(a[q:q+klen], key) {
				sh.settle(off)
				vlen, _ := uvarintAt(a, q-uvarintLen(vcap))
				return i, off, q + klen, vlen, vcap, true
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

// expiresAt returns the expiry of the entry at off, once settled.
func (sh *shard) expiresAt(off uint32) int64 {
	hi := sh.settle(off)
	return int64(uint64(hi)<<32 | uint64(binary.NativeEndian.Uint32(sh.arena[off:])))
}

// extend sets the expiry of the entry at off to expiresAt when the entry is
// live at now and expires before then, and reports whether it did. An
// entry that never expires (expiry 0) is left so.
func (sh *shard) extend(off uint32, now, expiresAt int64) bool {
	e := sh.expiresAt(off)
	if e <= 0 || e <= now || e >= expiresAt {
		return false
	}
	setExpiry(sh.arena, off, expiresAt)
	return true
}

// expired reports whether an entry with expiry e is expired at now.
func expired(e, now int64) bool {
	return e > 0 && e <= now
}

// appendEntry writes a new entry at the end of the arena, reserving at
// least vcap bytes for the value (roomFor), and returns its offset. It grows
// the arena by a quarter at a time (not Go's doubling), an eighth once it
// passes 64 KiB, to keep the slack per key small; the copying that costs
// stays amortised O(1). A new arena is published before the entry's slot
// is stored.
func (sh *shard) appendEntry(key, value []byte, expiresAt int64, vcap uint32) (uint32, error) {
	klen := uint32(len(key))
	vlen := uint32(len(value))
	vcap = roomFor(klen, vcap)
	need := entrySize(klen, vcap)
	a := sh.arena
	if len(a) == 0 {
		need += arenaPad
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
		c = (c + 7) &^ 7 // a whole number of words: the allocation is 8-aligned
		if c > maxArena {
			c = maxArena &^ 7
		}
		a = sh.moveArena(c)
	}
	if len(a) == 0 {
		a = a[:arenaPad]
	}
	off := uint32(len(a))
	e := uint64(max(expiresAt, 0))
	a = binary.NativeEndian.AppendUint32(a, uint32(e))
	a = binary.NativeEndian.AppendUint32(a, uint32(e>>32))
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
	clear(a[p+int(vlen):])
	sh.arena = a
	return off, nil
}

// moveArena copies the arena into a new allocation of c bytes, at the
// same offsets, and publishes it. Each live entry is settled first and
// copied without its hi word, which is written from the settled value: a
// decision that read the old view may still take and let go of the old
// entry's lock (finding seq moved), and neither its bit nor the word's
// bytes must be read while it does. Dead entries are left as zeros.
func (sh *shard) moveArena(c int) []byte {
	a := sh.arena
	na := make([]byte, len(a), c)
	for _, s := range sh.slots {
		if s == 0 {
			continue
		}
		off := uint32(s)
		hi := sh.settle(off)
		klen, p := uvarintAt(a, off+8)
		vcap, _ := uvarintAt(a, p)
		end := off + uint32(entrySize(klen, vcap))
		copy(na[off:off+4], a[off:off+4])
		binary.NativeEndian.PutUint32(na[off+4:], hi)
		copy(na[off+8:end], a[off+8:end])
	}
	sh.arena = na
	sh.publish()
	return na
}

// removeSlot empties slot i and shifts the rest of its probe run back so
// that every key stays reachable from its home slot. It updates count and
// dead but does not compact or resize: callers call tidy afterwards. Slots
// are stored atomically: decisions read the index without the shard lock
// (a key they miss while its run shifts sends them to the locked path).
func (sh *shard) removeSlot(i int) {
	slots := sh.slots
	n := len(slots)
	off := uint32(slots[i])
	klen, p := uvarintAt(sh.arena, off+8)
	vcap, _ := uvarintAt(sh.arena, p)
	sh.dead += entrySize(klen, vcap)
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
		atomic.StoreUint64(&slots[i], s)
		i = j
	}
	atomic.StoreUint64(&slots[i], 0)
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
		sh.cursor = int(uint64(sh.cursor) * uint64(n) / uint64(len(old)))
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
	if sh.dead > s.minDead && sh.dead*2 > len(sh.arena) {
		sh.compact()
		s.compactions.Add(1)
	}
}

// compact copies the live entries into a new arena, in index order, and
// trims each value's reserve to its length (roomFor). Slots keep their
// positions, so the sweeper's cursor stays valid; they are written to a new
// index, published with the new arena, so that a decision that read the
// old view finds the old entries (and then that seq moved). The work is
// bounded by the shard's size.
func (sh *shard) compact() {
	old := sh.arena
	live := len(old) - arenaPad - sh.dead
	a := make([]byte, arenaPad, max(16, (arenaPad+live+7)&^7))
	slots := make([]uint64, len(sh.slots))
	for i, s := range sh.slots {
		if s == 0 {
			continue
		}
		off := uint32(s)
		hi := sh.settle(off)
		klen, p := uvarintAt(old, off+8)
		vcap, p := uvarintAt(old, p)
		p += uvarintLen(vcap)
		vlen, _ := uvarintAt(old, p-uvarintLen(vcap))
		ncap := roomFor(klen, vlen)
		noff := len(a)
		a = append(a, old[off:off+4]...)
		a = binary.NativeEndian.AppendUint32(a, hi)
		a = binary.AppendUvarint(a, uint64(klen))
		a = binary.AppendUvarint(a, uint64(ncap))
		w := uvarintLen(ncap)
		q := len(a)
		a = a[:q+int(w)]
		putUvarintWidth(a[q:], vlen, w)
		a = append(a, old[p:p+klen+vlen]...)
		q = len(a)
		a = a[:q+int(ncap-vlen)]
		clear(a[q:])
		slots[i] = s&^math.MaxUint32 | uint64(noff)
	}
	sh.slots, sh.arena = slots, a
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
	c := sh.cursor
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
	sh.cursor = c
	return examined, removed
}

// valueLen returns the length of the value of the entry at off, whose
// value reserve is vcap, once the entry is settled.
func (sh *shard) valueLen(off, vcap uint32) uint32 {
	sh.settle(off)
	_, p := uvarintAt(sh.arena, off+8)
	n, _ := uvarintAt(sh.arena, p+uvarintLen(vcap))
	return n
}
