package engine

import (
	"encoding/binary"
	"sync/atomic"
)

// keyIndex numbers the distinct keys of one ApplyAll call: the slot of
// each key, in the order of first appearance. A call names a handful of
// keys, found fastest by a scan of their hashes; past scanKeys a map by
// hash takes over, so that a call's cost grows with its keys, not with
// their square (a door's request of 80,000 descriptors once spent seconds
// comparing every key with every other). The zero keyIndex is empty.
type keyIndex struct {
	keys   [][]byte         // keys[s]: slot s's namespaced key
	hashes []uint64         // hashes[s]: its hash
	first  map[uint64]int32 // the first slot of each hash, past scanKeys
	next   []int32          // next[s]: the next slot of slot s's hash, or -1 (with first)
}

// scanKeys is the most keys a keyIndex scans: below it a scan of the
// hashes costs less than a map's hashing and allocation.
const scanKeys = 16

// countProbes, set by tests, counts in probes every slot a lookup
// examines: the work the index does, independent of the clock.
var (
	countProbes bool
	probes      atomic.Int64
)

// slot returns k's slot (h its hash) and whether k is new, given the next
// slot then. k must not change while the index is in use.
func (x *keyIndex) slot(k []byte, h uint64) (int, bool) {
	if x.first == nil {
		for s, hs := range x.hashes {
			if countProbes {
				probes.Add(1)
			}
			if hs == h && string(x.keys[s]) == string(k) {
				return s, false
			}
		}
		s := len(x.keys)
		x.keys, x.hashes = append(x.keys, k), append(x.hashes, h)
		if len(x.keys) > scanKeys {
			x.index()
		}
		return s, true
	}
	last := int32(-1)
	for s, ok := x.first[h]; ok && s >= 0; s = x.next[s] {
		if countProbes {
			probes.Add(1)
		}
		if string(x.keys[s]) == string(k) {
			return int(s), false
		}
		last = s
	}
	s := int32(len(x.keys))
	x.keys, x.hashes, x.next = append(x.keys, k), append(x.hashes, h), append(x.next, -1)
	if last < 0 {
		x.first[h] = s
	} else {
		x.next[last] = s
	}
	return int(s), true
}

// index builds the map over the slots so far.
func (x *keyIndex) index() {
	x.first = make(map[uint64]int32, 2*len(x.keys))
	x.next = make([]int32, len(x.keys), 2*len(x.keys))
	for s := len(x.keys) - 1; s >= 0; s-- {
		x.next[s] = -1
		if f, ok := x.first[x.hashes[s]]; ok {
			x.next[s] = f
		}
		x.first[x.hashes[s]] = int32(s)
	}
}

// newKeyIndex returns an index with room for n keys.
func newKeyIndex(n int) keyIndex {
	return keyIndex{keys: make([][]byte, 0, n), hashes: make([]uint64, 0, n)}
}

// keysLen returns the bytes of reqs' namespaced keys (AppendKey's), so
// that one buffer holds them all.
func keysLen(reqs []Request) int {
	n := 0
	for _, r := range reqs {
		n += binary.MaxVarintLen64 + len(r.Limit.Namespace) + len(r.Key)
	}
	return n
}
