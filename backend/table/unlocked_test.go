package table

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"github.com/sluice-go/sluice/backend"
)

// record returns a value for key id at version v, of a length that varies
// with v (so that rewrites relocate entries), ending in a checksum byte.
func record(id, v uint32) []byte {
	n := 9 + int(v%24)
	b := make([]byte, n)
	binary.LittleEndian.PutUint32(b, id)
	binary.LittleEndian.PutUint32(b[4:], v)
	for i := 8; i < n-1; i++ {
		b[i] = byte(v) ^ byte(i)
	}
	var sum byte
	for _, c := range b[:n-1] {
		sum ^= c
	}
	b[n-1] = sum
	return b
}

// checkRecord returns an error unless b is a record(id, v) for some v.
func checkRecord(b []byte, id uint32) error {
	if len(b) < 9 {
		return fmt.Errorf("%d bytes", len(b))
	}
	if got := binary.LittleEndian.Uint32(b); got != id {
		return fmt.Errorf("key %d's record read for key %d", got, id)
	}
	v := binary.LittleEndian.Uint32(b[4:])
	if want := record(id, v); string(want) != string(b) {
		return fmt.Errorf("torn record %x, want %x", b, want)
	}
	return nil
}

// TestReadUnlockedUnderWrites: readers copy records with ReadUnlocked while
// a writer, under the shard's lock, rewrites them in place and elsewhere
// (lengths change), deletes and re-inserts them, and inserts and deletes
// hundreds of others, so that the index is resized, the arena reallocated
// and compacted and the shard emptied. Every record a reader is given is
// whole and is its key's: never torn, never another key's. (Under the race
// detector ReadUnlocked reads nothing, and the test checks that.)
func TestReadUnlockedUnderWrites(t *testing.T) {
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprint(shards, " shards"), func(t *testing.T) {
			s := New(&Options{Shards: shards, SweepInterval: -1})
			defer s.Close()
			const keys = 8
			key := func(id uint32) []byte { return fmt.Appendf(nil, "caller-%d", id) }
			for id := range uint32(keys) {
				if err := s.Put(key(id), record(id, 0), 0); err != nil {
					t.Fatal(err)
				}
			}
			const rounds = 20000
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			reads := make([]int, 3)
			for r := range reads {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var buf [MaxUnlocked]byte
					for i := range 20 * rounds {
						id := uint32(i+r) % keys
						k := key(id)
						rec, _, ok := s.ReadUnlocked(backend.Hash(k), k, buf[:], 1)
						if !ok {
							continue
						}
						if !UnlockedReads {
							errs <- fmt.Errorf("ReadUnlocked read a record in a build without UnlockedReads")
							return
						}
						reads[r]++
						if err := checkRecord(rec, id); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range uint32(rounds) {
					id := i % keys
					var err error
					switch i % 7 {
					case 0:
						err = s.Delete(key(id))
						if err == nil {
							err = s.Put(key(id), record(id, i), 0)
						}
					case 1:
						// Hundreds of other keys come and go: the index grows
						// and shrinks, the arena is reallocated and compacted.
						for j := range uint32(40) {
							o := fmt.Appendf(nil, "other-%d-%d", i, j)
							if err = s.Put(o, record(1000+j, i), 0); err != nil {
								break
							}
						}
						for j := range uint32(40) {
							if err == nil {
								err = s.Delete(fmt.Appendf(nil, "other-%d-%d", i, j))
							}
						}
					default:
						err = s.Put(key(id), record(id, i), 0)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			total := reads[0] + reads[1] + reads[2]
			if UnlockedReads && total == 0 {
				t.Fatal("no record was read without the lock")
			}
			t.Logf("%d records read without the lock", total)
		})
	}
}

// TestReadUnlockedRefuses: what ReadUnlocked leaves to the lock.
func TestReadUnlockedRefuses(t *testing.T) {
	s := New(&Options{SweepInterval: -1})
	var buf [MaxUnlocked]byte
	read := func(k []byte, now int64) bool {
		_, _, ok := s.ReadUnlocked(backend.Hash(k), k, buf[:], now)
		return ok
	}
	k := []byte("caller")
	if !UnlockedReads {
		// This build (the race detector's, or not amd64) reads nothing
		// without the lock.
		if err := s.Put(k, []byte("record"), 0); err != nil {
			t.Fatal(err)
		}
		if read(k, 1) {
			t.Error("a record was read without the lock in a build without UnlockedReads")
		}
		return
	}
	if read(k, 1) {
		t.Error("an absent key was read")
	}
	if err := s.Put(k, []byte("record"), 100); err != nil {
		t.Fatal(err)
	}
	if !read(k, 99) {
		t.Error("a live record was not read")
	}
	if read(k, 100) {
		t.Error("an expired record was read")
	}
	long := make([]byte, MaxUnlocked+1)
	if err := s.Put([]byte("long"), long, 0); err != nil {
		t.Fatal(err)
	}
	if read([]byte("long"), 1) {
		t.Error("a record longer than the buffer was read")
	}
	bigKey := make([]byte, 0x80)
	if err := s.Put(bigKey, []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if read(bigKey, 1) {
		t.Error("a record under a key of 128 bytes was read")
	}
	h := backend.Hash(k)
	s.Lock(int(h & s.mask))
	held := read(k, 1)
	s.Unlock(int(h & s.mask))
	if held {
		t.Error("a record was read while its shard's lock was held")
	}
	s.Close()
	if read(k, 1) {
		t.Error("a record was read from a closed table")
	}
}
