package table

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/backend"
)

// increment adds one to the counter in the first 8 bytes of key's record,
// under the key's entry lock when LockEntry takes it, under the shard's
// lock otherwise, as the engine decides; it reports which. It lets go of
// every lock before it returns an error.
func increment(s *Table, key []byte) (entry bool, err error) {
	h := backend.Hash(key)
	if e, ok := s.LockEntry(h, key); ok {
		r := e.Record(1)
		if len(r) < 8 {
			e.Unlock()
			return true, fmt.Errorf("LockEntry(%q): a record of %d bytes", key, len(r))
		}
		binary.LittleEndian.PutUint64(r, binary.LittleEndian.Uint64(r)+1)
		if !e.Commit(r, 0) {
			e.Unlock()
			return true, fmt.Errorf("Commit(%q) of the record stepped in place = false", key)
		}
		return true, nil
	}
	i := int(h & s.mask)
	s.Lock(i)
	defer s.Unlock(i)
	r, err := s.GetLocked(h, key, 1)
	if err != nil || len(r) < 8 {
		return false, fmt.Errorf("GetLocked(%q) = %d bytes, %v", key, len(r), err)
	}
	binary.LittleEndian.PutUint64(r, binary.LittleEndian.Uint64(r)+1)
	if err := s.PutLocked(h, key, r, 0); err != nil {
		return false, fmt.Errorf("PutLocked(%q) = %v", key, err)
	}
	return false, nil
}

// TestEntryLockUnderChurn: workers count into a few keys' records, each
// increment under the key's entry lock (LockEntry) or, when LockEntry
// declines, under the shard's lock, while another goroutine changes the
// same shards under their locks: new keys (the index grows, the arena is
// reallocated), deletions (probe runs shift), the counted keys moved to a
// new entry or their records resized past what LockEntry takes (and back),
// whole-shard compactions, sweeps, and several shards held at once. Every
// key's count comes out exact: no increment is lost or applied twice, and
// a moved record keeps its count. Run it under -race.
func TestEntryLockUnderChurn(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		shards := rapid.SampledFrom([]int{1, 2, 4}).Draw(t, "shards")
		keys := rapid.IntRange(1, 24).Draw(t, "keys")
		workers := rapid.IntRange(2, 4).Draw(t, "workers")
		per := rapid.IntRange(20, 300).Draw(t, "per") // at least; they go on until the churn ends
		ops := rapid.SliceOfN(rapid.IntRange(0, 6), 1, 300).Draw(t, "ops")
		s := New(&Options{Shards: shards, SweepInterval: -1})
		defer s.Close()
		s.minDead = 0 // compact as soon as half an arena is dead
		key := func(k int) []byte { return fmt.Appendf(nil, "counter-%d", k) }
		for k := range keys {
			if err := s.Put(key(k), make([]byte, 8), 0); err != nil {
				t.Fatal(err)
			}
		}
		var (
			wg      sync.WaitGroup
			stop    atomic.Bool
			counted = make([][]uint64, workers) // per worker, per key
			entries = make([]int, workers)      // increments under an entry lock
			errs    = make([]error, workers)
		)
		for w := range workers {
			counted[w] = make([]uint64, keys)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < per || !stop.Load(); i++ {
					k := (w*7 + i*3) % keys
					entry, err := increment(s, key(k))
					if err != nil {
						errs[w] = err
						return
					}
					if entry {
						entries[w]++
					}
					counted[w][k]++
				}
			}()
		}
		churn := 0 // churn keys inserted so far
		for i, op := range slices.Repeat(ops, 20) {
			k := key(i % keys)
			h := backend.Hash(k)
			sh := int(h & s.mask)
			switch op {
			case 0, 1: // a new key, expiring at 5
				if err := s.Put(fmt.Appendf(nil, "churn-%d", churn), []byte("v"), 5); err != nil {
					t.Fatal(err)
				}
				churn++
			case 2: // a deletion
				if churn > 0 {
					s.Delete(fmt.Appendf(nil, "churn-%d", i%churn))
				}
			case 3: // a counted key moved to a new entry, its count kept
				s.Lock(sh)
				r, err := s.GetLocked(h, k, 1)
				if err != nil {
					t.Fatal(err)
				}
				r = append([]byte(nil), r...)
				if err := s.DeleteLocked(h, k); err != nil {
					t.Fatal(err)
				}
				if err := s.PutLocked(h, k, r, 0); err != nil {
					t.Fatal(err)
				}
				s.Unlock(sh)
			case 4: // a counted record resized: past LockEntry's reserve, or back
				s.Lock(sh)
				r, err := s.GetLocked(h, k, 1)
				if err != nil {
					t.Fatal(err)
				}
				n := 8
				if len(r) == 8 {
					n = 200
				}
				v := make([]byte, n)
				copy(v, r[:8])
				if err := s.PutLocked(h, k, v, 0); err != nil {
					t.Fatal(err)
				}
				s.Unlock(sh)
			case 5: // a sweep at 10: every churn key has expired
				if _, err := s.Sweep(10, 0); err != nil {
					t.Fatal(err)
				}
			case 6: // every shard held at once, in order
				for j := range s.Stripes() {
					s.Lock(j)
				}
				for j := s.Stripes() - 1; j >= 0; j-- {
					s.Unlock(j)
				}
			}
		}
		stop.Store(true)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		for k := range keys {
			want := uint64(0)
			for w := range workers {
				want += counted[w][k]
			}
			r, err := s.Get(key(k), 1)
			if err != nil || len(r) < 8 {
				t.Fatalf("Get(%q) = %d bytes, %v", key(k), len(r), err)
			}
			if got := binary.LittleEndian.Uint64(r); got != want {
				t.Errorf("%q counted %d, want %d (increments under an entry lock, per worker: %v)", key(k), got, want, entries)
			}
		}
	})
}

// TestLockEntryDeclines: LockEntry takes only what it can decide in place
// and declines the rest, holding nothing: a key the table does not hold, a
// record over 64 bytes, a shard someone holds, a closed table.
func TestLockEntryDeclines(t *testing.T) {
	s := New(&Options{Shards: 1, SweepInterval: -1})
	small, big, absent := []byte("small"), []byte("big"), []byte("absent")
	s.Put(small, []byte("12345678"), 0)
	s.Put(big, make([]byte, 65), 0)
	for _, k := range [][]byte{big, absent} {
		if _, ok := s.LockEntry(backend.Hash(k), k); ok {
			t.Errorf("LockEntry(%q) = true", k)
		}
	}
	s.Lock(0)
	if _, ok := s.LockEntry(backend.Hash(small), small); ok {
		t.Errorf("LockEntry(%q) with the shard held = true", small)
	}
	s.Unlock(0)
	e, ok := s.LockEntry(backend.Hash(small), small)
	if !ok {
		t.Fatalf("LockEntry(%q) = false", small)
	}
	if got := string(e.Record(1)); got != "12345678" {
		t.Errorf("Record(1) = %q", got)
	}
	if e.Commit(make([]byte, 65), 0) {
		t.Errorf("Commit of 65 bytes into a reserve of %d = true", e.vcap)
	}
	e.Unlock()
	// The entry is free again: a holder of the shard reads it.
	if v, err := s.Get(small, 1); err != nil || string(v) != "12345678" {
		t.Errorf("Get after Unlock = %q, %v", v, err)
	}
	s.Close()
	if _, ok := s.LockEntry(backend.Hash(small), small); ok {
		t.Errorf("LockEntry after Close = true")
	}
}
