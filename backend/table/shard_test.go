package table

import (
	"bytes"
	"fmt"
	"testing"
	"unsafe"

	"github.com/sluice-go/sluice/backend"
)

// checkInvariants verifies every shard's index and arena: counts agree, each
// slot is reachable from its home slot without crossing an empty one, each
// entry's key hashes (under the given hash function) to its fingerprint, and
// dead bytes are bounded.
func checkInvariants(t *testing.T, s *Table) {
	t.Helper()
	total := 0
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		n := len(sh.slots)
		used := 0
		for i, slot := range sh.slots {
			if slot == 0 {
				continue
			}
			used++
			fp := uint32(slot >> 32)
			for j := home(fp, sh.seed, n); j != i; j = (j + 1) % n {
				if sh.slots[j] == 0 {
					t.Errorf("shard %d: slot %d unreachable from home %d (empty slot %d between)", si, i, home(fp, sh.seed, n), j)
					break
				}
			}
			off := uint32(slot)
			if int(off) >= len(sh.arena) || off == 0 {
				t.Errorf("shard %d: slot %d has offset %d outside arena of %d bytes", si, i, off, len(sh.arena))
			}
		}
		if used != sh.count {
			t.Errorf("shard %d: %d slots used, count = %d", si, used, sh.count)
		}
		if n > 0 && sh.count*5 > n*4 {
			t.Errorf("shard %d: load %d/%d above 4/5", si, sh.count, n)
		}
		if int(sh.dead) > s.minDead && int(sh.dead)*2 > len(sh.arena) {
			t.Errorf("shard %d: %d dead bytes of %d not compacted", si, sh.dead, len(sh.arena))
		}
		if sh.count == 0 && (sh.slots != nil || sh.arena != nil) {
			t.Errorf("shard %d: empty but holds memory", si)
		}
		total += sh.count
		sh.mu.Unlock()
	}
	if got := s.Len(); got != total {
		t.Errorf("Len() = %d, shards hold %d", got, total)
	}
}

func TestUvarintWidth(t *testing.T) {
	for _, x := range []uint32{0, 1, 127, 128, 300, 1<<14 - 1, 1 << 14, 1<<21 + 5, 1 << 30} {
		for w := uvarintLen(x); w <= 5; w++ {
			b := make([]byte, w+1)
			putUvarintWidth(b, x, w)
			got, p := uvarintAt(b, 0)
			if got != x || p != w {
				t.Errorf("uvarint %d in %d bytes: read %d, next %d", x, w, got, p)
			}
		}
	}
}

func TestCompaction(t *testing.T) {
	tests := []struct {
		name   string
		keys   int
		rounds int
		size   func(key, round int) int
	}{
		{"grow every round", 300, 12, func(k, r int) int { return 1 + r*8 + k%3 }},
		{"alternate small large", 300, 12, func(k, r int) int {
			if (k+r)%2 == 0 {
				return 3
			}
			return 200 + k%50
		}},
		{"one key grows a lot", 1, 40, func(k, r int) int { return 1 << (r % 17) }},
		{"shrink every round", 200, 10, func(k, r int) int { return 2000 - r*190 - k%7 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(&Options{Shards: 1, SweepInterval: -1})
			t.Cleanup(func() { s.Close() })
			value := func(k, r int) []byte {
				return bytes.Repeat([]byte{byte(k), byte(r)}, tt.size(k, r))[:tt.size(k, r)]
			}
			key := func(k int) []byte { return []byte(fmt.Sprintf("key-%d", k)) }
			for r := range tt.rounds {
				for k := range tt.keys {
					if err := s.Put(key(k), value(k, r), 0); err != nil {
						t.Fatalf("round %d: Put(%q) = %v", r, key(k), err)
					}
				}
				for k := range tt.keys {
					got, err := s.Get(key(k), 1)
					if want := value(k, r); err != nil || !bytes.Equal(got, want) {
						t.Fatalf("round %d: Get(%q) = %x, %v, want %x", r, key(k), got, err, want)
					}
				}
				checkInvariants(t, s)
			}
			if s.Stats().Compactions == 0 {
				t.Errorf("Stats().Compactions = 0 after %d rounds of resizing", tt.rounds)
			}
			// Deleting everything releases the shard.
			for k := range tt.keys {
				s.Delete(key(k))
			}
			checkInvariants(t, s)
		})
	}
}

func TestCollisionsLocked(t *testing.T) {
	s := New(&Options{Shards: 1, SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	sh := &s.shards[0]
	s.Lock(0)
	defer s.Unlock(0)
	// Make the index exist so home slots can be computed for its size.
	if err := s.PutLocked(1, []byte("seed"), []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	n := len(sh.slots)
	// Two fingerprints with the same home slot.
	fpA := uint32(7)
	fpB := fpA + 1
	for home(fpB, sh.seed, n) != home(fpA, sh.seed, n) {
		fpB++
	}
	tests := []struct {
		name   string
		ha, hb uint64
	}{
		{"same full hash", 0xabcdef0123456789, 0xabcdef0123456789},
		{"same fingerprint, other low bits", 0xabcdef0100000001, 0xabcdef01ffff0002},
		{"same home slot, other fingerprints", uint64(fpA) << 32, uint64(fpB) << 32},
	}
	for i, tt := range tests {
		a := []byte(fmt.Sprintf("a%d", i))
		b := []byte(fmt.Sprintf("b%d", i))
		steps := []struct {
			op   string
			key  []byte
			h    uint64
			val  string
			want map[string]string // key -> value ("" = absent) after the step
		}{
			{"put", a, tt.ha, "va", map[string]string{"a": "va", "b": ""}},
			{"put", b, tt.hb, "vb", map[string]string{"a": "va", "b": "vb"}},
			{"put", a, tt.ha, "va-grown-past-its-space", map[string]string{"a": "va-grown-past-its-space", "b": "vb"}},
			{"del", a, tt.ha, "", map[string]string{"a": "", "b": "vb"}},
			{"put", a, tt.ha, "va2", map[string]string{"a": "va2", "b": "vb"}},
			{"del", b, tt.hb, "", map[string]string{"a": "va2", "b": ""}},
			{"del", a, tt.ha, "", map[string]string{"a": "", "b": ""}},
		}
		for j, st := range steps {
			var err error
			if st.op == "put" {
				err = s.PutLocked(st.h, st.key, []byte(st.val), 0)
			} else {
				err = s.DeleteLocked(st.h, st.key)
			}
			if err != nil {
				t.Fatalf("%s: step %d: %s(%q) = %v", tt.name, j, st.op, st.key, err)
			}
			for name, want := range st.want {
				k, h := a, tt.ha
				if name == "b" {
					k, h = b, tt.hb
				}
				got, err := s.GetLocked(h, k, 1)
				if err != nil || string(got) != want || (want == "") != (got == nil) {
					t.Fatalf("%s: step %d: GetLocked(%#x, %q) = %q, %v, want %q", tt.name, j, h, k, got, err, want)
				}
			}
		}
	}
	if got, _ := s.GetLocked(1, []byte("seed"), 1); string(got) != "x" {
		t.Errorf("GetLocked(seed) = %q, want %q", got, "x")
	}
}

func TestSweepShardBudget(t *testing.T) {
	s := New(&Options{Shards: 1, SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	for i := range 1000 {
		exp := int64(10)
		if i%2 == 0 {
			exp = 0
		}
		s.Put([]byte(fmt.Sprintf("k%d", i)), []byte("v"), exp)
	}
	sh := &s.shards[0]
	for _, limit := range []int{0, 1, 7, 100} {
		sh.mu.Lock()
		examined, removed := sh.sweep(20, limit)
		sh.mu.Unlock()
		if examined > limit || removed > examined {
			t.Errorf("sweep(limit %d) examined %d, removed %d", limit, examined, removed)
		}
	}
	// One full pass removes every expired key even though removals shift
	// keys back past the cursor.
	for range 20 {
		sh.mu.Lock()
		sh.sweep(20, 1000)
		s.tidy(sh)
		sh.mu.Unlock()
	}
	s.keys.Store(int64(sh.count))
	if sh.count != 500 {
		t.Errorf("after sweeping, count = %d, want 500", sh.count)
	}
	checkInvariants(t, s)
	for i := 0; i < 1000; i += 2 {
		k := []byte(fmt.Sprintf("k%d", i))
		if v, _ := s.Get(k, 20); string(v) != "v" {
			t.Fatalf("Get(%q) = %q after sweep, want %q", k, v, "v")
		}
	}
}

// TestXXHashFingerprint pins the split of the hash the engine relies on:
// the stripe comes from the low bits, the fingerprint from the high ones.
func TestXXHashFingerprint(t *testing.T) {
	s := New(&Options{Shards: 16, SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	key := []byte("user:42")
	h := backend.Hash(key)
	s.Put(key, []byte("v"), 0)
	sh := &s.shards[h&15]
	sh.mu.Lock()
	_, _, _, _, _, ok := sh.find(uint32(h>>32), key)
	sh.mu.Unlock()
	if !ok {
		t.Fatalf("key not found in shard %d under fingerprint %#x", h&15, uint32(h>>32))
	}
}

func TestShardSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is padded for 64-bit words")
	}
	if size := unsafe.Sizeof(shard{}); size%64 != 0 {
		t.Errorf("sizeof(shard) = %d, want a multiple of 64 so shards do not share cache lines", size)
	}
	// Each group of fields stays on its own cache line (see shard).
	var sh shard
	lines := []struct {
		name       string
		first, end uintptr
		line       uintptr
	}{
		{"lock and memo", unsafe.Offsetof(sh.mu), unsafe.Offsetof(sh.hotKlen) + 4, 0},
		{"index and arena", unsafe.Offsetof(sh.slots), unsafe.Offsetof(sh.denying) + 4, 1},
		{"counts", unsafe.Offsetof(sh.count), unsafe.Offsetof(sh.now) + 8, 2},
	}
	for _, l := range lines {
		if l.first/64 != l.line || (l.end-1)/64 != l.line {
			t.Errorf("%s at bytes [%d, %d), want all in cache line %d", l.name, l.first, l.end, l.line)
		}
	}
}

// TestTickCoversEveryShard: one background sweep frees every expired key
// of every shard, however unevenly the keys fall across the shards and
// however small SweepBatch is.
func TestTickCoversEveryShard(t *testing.T) {
	for _, shards := range []int{1, 2, 8} {
		s := New(&Options{Shards: shards, SweepBatch: 1, SweepInterval: -1, Now: func() int64 { return 200 }})
		for i := range 10_001 {
			if err := s.Put(fmt.Appendf(nil, "key-%d", i), []byte("v"), 100); err != nil {
				t.Fatal(err)
			}
		}
		if got := s.Stats().SweptAt; got != 0 {
			t.Errorf("%d shards: Stats().SweptAt = %d before any tick, want 0", shards, got)
		}
		s.tick()
		if n := s.Len(); n != 0 {
			t.Errorf("%d shards: %d of 10,001 expired keys left after one tick", shards, n)
		}
		if got := s.Stats().SweptAt; got != 200 {
			t.Errorf("%d shards: Stats().SweptAt = %d after a tick at 200, want 200", shards, got)
		}
		s.Close()
	}
}

// TestSameKey: the word-wise comparison agrees with bytes.Equal at every
// length around its 8-, 16-, 24- and 32-byte steps, whichever byte differs.
func TestSameKey(t *testing.T) {
	for n := 0; n <= 40; n++ {
		a := make([]byte, n)
		for i := range a {
			a[i] = byte(i*7 + 1)
		}
		if !sameKey(a, bytes.Clone(a)) {
			t.Fatalf("sameKey of two copies of %d bytes = false", n)
		}
		for i := range n {
			b := bytes.Clone(a)
			b[i] ^= 0x40
			if sameKey(a, b) {
				t.Fatalf("sameKey of %d bytes differing at %d = true", n, i)
			}
		}
		if n > 0 && sameKey(a, a[:n-1]) {
			t.Fatalf("sameKey of %d and %d bytes = true", n, n-1)
		}
	}
}

// TestCountsPerShard: an unbounded store counts its keys in each shard and
// sums them on read, writing no counter that other shards' writes share; a
// bounded one (MaxKeys) also keeps the store-wide count it reserves room
// with, and the two agree.
func TestCountsPerShard(t *testing.T) {
	for _, maxKeys := range []int{0, 5000} {
		s := New(&Options{Shards: 8, SweepInterval: -1, MaxKeys: maxKeys})
		for i := range 1000 {
			if err := s.Put(fmt.Appendf(nil, "k%d", i), []byte("v"), 0); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 300 {
			s.Delete(fmt.Appendf(nil, "k%d", i))
		}
		if got := s.Len(); got != 700 {
			t.Errorf("MaxKeys %d: Len() = %d, want 700", maxKeys, got)
		}
		want := int64(0)
		if maxKeys > 0 {
			want = 700
		}
		if got := s.keys.Load(); got != want {
			t.Errorf("MaxKeys %d: the store-wide count is %d, want %d", maxKeys, got, want)
		}
		checkInvariants(t, s)
		s.Close()
		if got := s.Len(); got != 0 {
			t.Errorf("MaxKeys %d: Len() after Close = %d", maxKeys, got)
		}
	}
}
