package table

import (
	"bytes"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/backend"
)

// TestModelInternals drives a small store (few shards, tiny sweep batches,
// values that change size) through random operations including sweeps, and
// after every step compares it with a map and checks the index and arena
// invariants. It complements backendtest's model, which sees only the
// Backend API.
func TestModelInternals(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		shards := rapid.SampledFrom([]int{1, 2}).Draw(rt, "shards")
		s := New(&Options{Shards: shards, SweepInterval: -1, SweepBatch: rapid.IntRange(1, 8).Draw(rt, "batch")})
		defer s.Close()
		// Compact as soon as half the arena is dead, so that short runs
		// meet compaction too.
		s.minDead = 0
		type rec struct {
			v []byte
			e int64
		}
		m := map[string]rec{}
		var now int64 = 1
		keys := make([]string, 40)
		for i := range keys {
			keys[i] = fmt.Sprintf("key-%d", i)
		}
		live := func(k string) []byte {
			r, ok := m[k]
			if !ok || expired(r.e, now) {
				return nil
			}
			return r.v
		}
		rt.Repeat(map[string]func(*rapid.T){
			"Put": func(rt *rapid.T) {
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				// Sizes around the 64-byte reserve rule and past 128, where
				// length fields take two bytes.
				v := bytes.Repeat([]byte{byte(rapid.IntRange(0, 255).Draw(rt, "b"))},
					rapid.SampledFrom([]int{1, 2, 17, 40, 64, 65, 127, 128, 300}).Draw(rt, "n"))
				e := rapid.SampledFrom([]int64{0, now + 1, now + 5, now - 1}).Draw(rt, "exp")
				if err := s.Put([]byte(k), v, e); err != nil {
					rt.Fatalf("Put(%q) = %v", k, err)
				}
				m[k] = rec{v, e}
			},
			"StepLocked": func(rt *rapid.T) {
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				grow := rapid.IntRange(-2, 3).Draw(rt, "grow")
				h := backend.Hash([]byte(k))
				i := int(h & s.mask)
				s.Lock(i)
				defer s.Unlock(i)
				v, err := s.GetLocked(h, []byte(k), now)
				if err != nil || !bytes.Equal(v, live(k)) {
					rt.Fatalf("GetLocked(%q) = %x, %v, want %x", k, v, err, live(k))
				}
				if v == nil {
					v = []byte{0}
				}
				for j := range v {
					v[j]++
				}
				next := v
				switch {
				case grow > 0:
					next = append(bytes.Clone(v), bytes.Repeat([]byte{7}, grow*20)...)
				case grow < 0:
					next = v[:max(1, len(v)/2)]
				}
				want := bytes.Clone(next)
				if err := s.PutLocked(h, []byte(k), next, 0); err != nil {
					rt.Fatalf("PutLocked(%q) = %v", k, err)
				}
				m[k] = rec{want, 0}
			},
			"StepRef": func(rt *rapid.T) {
				// LookupLocked, the record stepped where it lies (or
				// replaced by one of another length, or a new one built in
				// the room it lends), then SetExpiryLocked or PutRefLocked:
				// the engine's in-process decision.
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				h := backend.Hash([]byte(k))
				i := int(h & s.mask)
				s.Lock(i)
				defer s.Unlock(i)
				v, ref, err := s.LookupLocked(h, []byte(k), now)
				if err != nil || !bytes.Equal(v, live(k)) || v == nil {
					rt.Fatalf("LookupLocked(%q) = %x, %v, want %x (never nil)", k, v, err, live(k))
				}
				if len(v) == 0 && cap(v) < 32 {
					rt.Fatalf("LookupLocked(%q) lent %d bytes of room, want 32", k, cap(v))
				}
				e := rapid.SampledFrom([]int64{0, now + 1, now + 5}).Draw(rt, "exp")
				next := v
				switch grow := rapid.IntRange(-1, 2).Draw(rt, "grow"); {
				case len(v) == 0:
					next = append(v, bytes.Repeat([]byte{9}, rapid.IntRange(1, 32).Draw(rt, "fresh"))...)
				case grow == 0:
					for j := range next {
						next[j]++
					}
				case grow > 0:
					next = append(bytes.Clone(v), bytes.Repeat([]byte{7}, grow*20)...)
				default:
					next = bytes.Clone(v[:max(1, len(v)/2)])
				}
				want := bytes.Clone(next)
				if set := ref.SetExpiryLocked(next, e); set != (len(v) > 0 && len(next) == len(v) && &next[0] == &v[0]) {
					rt.Fatalf("SetExpiryLocked(%q) = %v for a record of %d bytes stepped to %d", k, set, len(v), len(next))
				} else if !set {
					if err := s.PutRefLocked(h, ref, []byte(k), next, now, e); err != nil {
						rt.Fatalf("PutRefLocked(%q) = %v", k, err)
					}
				}
				m[k] = rec{want, e}
			},
			"PutLocked": func(rt *rapid.T) {
				// Writes of several lengths under one lock, no read between.
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				ns := rapid.SliceOfN(rapid.SampledFrom([]int{1, 3, 17, 40, 70, 130}), 1, 4).Draw(rt, "lengths")
				h := backend.Hash([]byte(k))
				i := int(h & s.mask)
				s.Lock(i)
				defer s.Unlock(i)
				if rapid.Bool().Draw(rt, "readFirst") {
					s.GetLocked(h, []byte(k), now)
				}
				for j, n := range ns {
					v := bytes.Repeat([]byte{byte(j + 1)}, n)
					if err := s.PutLocked(h, []byte(k), v, 0); err != nil {
						rt.Fatalf("PutLocked(%q) = %v", k, err)
					}
					m[k] = rec{v, 0}
				}
			},
			"Delete": func(rt *rapid.T) {
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				s.Delete([]byte(k))
				delete(m, k)
			},
			"Sweep": func(rt *rapid.T) {
				budget := rapid.IntRange(0, 20).Draw(rt, "budget")
				if budget == 0 {
					budget = 1 // zero would mean the store's batch size
				}
				if r, err := s.Sweep(now, budget); err != nil || r > budget {
					rt.Fatalf("Sweep(%d, %d) removed %d, %v", now, budget, r, err)
				}
			},
			"Advance": func(rt *rapid.T) {
				now += int64(rapid.IntRange(1, 3).Draw(rt, "dt"))
			},
			"": func(rt *rapid.T) {
				for _, k := range keys {
					v, err := s.Get([]byte(k), now)
					if err != nil || !bytes.Equal(v, live(k)) || (v == nil) != (live(k) == nil) {
						rt.Fatalf("Get(%q) = %x, %v, want %x", k, v, err, live(k))
					}
				}
				lo, hi := 0, len(m)
				for k := range m {
					if live(k) != nil {
						lo++
					}
				}
				if n := s.Len(); n < lo || n > hi {
					rt.Fatalf("Len() = %d, want in [%d, %d]", n, lo, hi)
				}
				checkInvariants(t, s)
				if t.Failed() {
					rt.FailNow()
				}
			},
		})
	})
}
