package bench

// BenchmarkIndexLayout is not a limiter: it measures the memory accesses of
// a lookup in two layouts of a keyed store over 100,000 keys, so that the
// cost of the memory store's two dependent cache misses per decision, and
// what the alternative would buy and cost, are figures rather than guesses.
//
//   - two-miss is the memory store's layout: per shard, an index of 8-byte
//     slots (fingerprint and offset) and an arena of variable-length
//     entries (expiry, lengths, key, value). The entry's address is in the
//     slot, so the second load waits for the first.
//   - one-miss keeps each entry whole in a 64-byte cell of the index, at a
//     position the hash gives: one load finds fingerprint, key and value.
//
// Both have 256 shards at the same index load (2/3, the middle of the
// memory store's 8/15..4/5), compare the full 26-byte namespaced key, and
// rewrite 8 bytes of a 17-byte value (a token bucket's record), as a
// decision does. Each reports B/key, the bytes its index and entries take
// per key. The keys are visited in creation order (the order Keys100k uses)
// and in a fixed random order (Keys100kShuffled's).

import (
	"encoding/binary"
	"hash/maphash"
	"testing"
)

// layoutShards is the memory store's shard count on up to 4 cores.
const layoutShards = 256

// layoutValue is the value length: a token bucket's record.
const layoutValue = 17

// layoutHome maps a 32-bit fingerprint to a slot of an index of n.
func layoutHome(fp uint32, n int) int {
	return int((uint64(fp*0x9e3779b1) * uint64(n)) >> 32)
}

// twoMiss is one shard of the two-miss layout.
type twoMiss struct {
	slots []uint64 // fp<<32 | offset; 0 is empty
	arena []byte   // [expiry 8][klen 1][vlen 1][key][value]
}

func (s *twoMiss) insert(fp uint32, key string) {
	i := layoutHome(fp, len(s.slots))
	for s.slots[i] != 0 {
		if i++; i == len(s.slots) {
			i = 0
		}
	}
	off := len(s.arena)
	s.arena = binary.LittleEndian.AppendUint64(s.arena, 0)
	s.arena = append(s.arena, byte(len(key)), layoutValue)
	s.arena = append(s.arena, key...)
	s.arena = append(s.arena, make([]byte, layoutValue)...)
	s.slots[i] = uint64(fp)<<32 | uint64(off)
}

// touch finds key and adds one to the first 8 bytes of its value.
func (s *twoMiss) touch(fp uint32, key string) bool {
	for i := layoutHome(fp, len(s.slots)); ; {
		v := s.slots[i]
		if v == 0 {
			return false
		}
		if uint32(v>>32) == fp {
			off := int(uint32(v))
			klen := int(s.arena[off+8])
			k := s.arena[off+10 : off+10+klen]
			if string(k) == key {
				p := s.arena[off+10+klen:]
				binary.LittleEndian.PutUint64(p, binary.LittleEndian.Uint64(p)+1)
				return true
			}
		}
		if i++; i == len(s.slots) {
			i = 0
		}
	}
}

// cellSize is one-miss's cell: [fp 4][klen 1][vlen 1][pad 2][expiry 8]
// [key and value, 48].
const cellSize = 64

// oneMiss is one shard of the one-miss layout.
type oneMiss struct {
	cells []byte
	n     int
}

func (s *oneMiss) insert(fp uint32, key string) {
	i := layoutHome(fp, s.n)
	for binary.LittleEndian.Uint32(s.cells[i*cellSize:]) != 0 {
		if i++; i == s.n {
			i = 0
		}
	}
	c := s.cells[i*cellSize : (i+1)*cellSize]
	binary.LittleEndian.PutUint32(c, fp)
	c[4], c[5] = byte(len(key)), layoutValue
	copy(c[16:], key)
}

func (s *oneMiss) touch(fp uint32, key string) bool {
	for i := layoutHome(fp, s.n); ; {
		c := s.cells[i*cellSize : (i+1)*cellSize]
		f := binary.LittleEndian.Uint32(c)
		if f == 0 {
			return false
		}
		if f == fp {
			klen := int(c[4])
			if string(c[16:16+klen]) == key {
				p := c[16+klen:]
				binary.LittleEndian.PutUint64(p, binary.LittleEndian.Uint64(p)+1)
				return true
			}
		}
		if i++; i == s.n {
			i = 0
		}
	}
}

func BenchmarkIndexLayout(b *testing.B) {
	keys := Keys(100_000)
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = "bench\x00api\x00" + k // 26 bytes, as the engine namespaces them
	}
	seed := maphash.MakeSeed()
	hash := func(k string) (int, uint32) {
		h := maphash.String(seed, k)
		return int(h & (layoutShards - 1)), uint32(h>>32) | 1 // fp 0 marks empty
	}
	slotsPerShard := len(full) * 3 / 2 / layoutShards
	orders := []struct {
		name string
		keys []string
	}{{"creation", full}, {"shuffled", Shuffled(full)}}
	for _, order := range orders {
		b.Run("two-miss/"+order.name, func(b *testing.B) {
			shards := make([]twoMiss, layoutShards)
			for i := range shards {
				shards[i].slots = make([]uint64, slotsPerShard)
			}
			for _, k := range full {
				s, fp := hash(k)
				shards[s].insert(fp, k)
			}
			bytes := 0
			for i := range shards {
				bytes += 8*len(shards[i].slots) + len(shards[i].arena)
			}
			runLayout(b, order.keys, func(k string) bool {
				s, fp := hash(k)
				return shards[s].touch(fp, k)
			})
			b.ReportMetric(float64(bytes)/float64(len(full)), "B/key")
		})
		b.Run("one-miss/"+order.name, func(b *testing.B) {
			shards := make([]oneMiss, layoutShards)
			for i := range shards {
				shards[i] = oneMiss{cells: make([]byte, slotsPerShard*cellSize), n: slotsPerShard}
			}
			for _, k := range full {
				s, fp := hash(k)
				shards[s].insert(fp, k)
			}
			runLayout(b, order.keys, func(k string) bool {
				s, fp := hash(k)
				return shards[s].touch(fp, k)
			})
			b.ReportMetric(float64(layoutShards*slotsPerShard*cellSize)/float64(len(full)), "B/key")
		})
	}
}

// runLayout touches the keys in turn, b.N times in all, and fails when a
// key is not found.
func runLayout(b *testing.B, keys []string, touch func(string) bool) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if !touch(keys[i]) {
			b.Fatalf("key %q not found", keys[i])
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
}
