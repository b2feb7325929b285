package backendtest

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/backend"
)

// modelKeys is the small key set the model property draws from, so that
// operations keep hitting the same records. It mixes binary keys, prefixes
// of one another and a long key.
var modelKeys = []string{
	"a", "ab", "b", "\x00", "\x00\x00", "\xff", "user:0001",
	"a-key-long-enough-to-need-more-than-one-cache-line-0123456789-0123456789",
}

// record is the model's view of one key.
type record struct {
	value     []byte
	expiresAt int64
}

// model is a plain map with expiry: the reference every backend must match.
type model map[string]record

func (m model) get(key string, now int64) []byte {
	r, ok := m[key]
	if !ok || (r.expiresAt > 0 && r.expiresAt <= now) {
		return nil
	}
	return r.value
}

// live counts the keys not expired at now: Counter.Len must report at least
// these, and at most every key not deleted.
func (m model) live(now int64) int {
	n := 0
	for k := range m {
		if m.get(k, now) != nil {
			n++
		}
	}
	return n
}

// testModel checks that random sequences of writes, reads, deletes and
// clock steps give the same answers from the backend as from the model.
// Striped backends also get the locked operations, including stepping a
// record in place through the slice GetLocked returns.
func testModel(t *testing.T, open func(t *testing.T) backend.Backend) {
	rapid.Check(t, func(rt *rapid.T) {
		b := open(t)
		defer b.Close()
		sb, isStriped := b.(backend.Striped)
		counter, isCounter := b.(backend.Stats)

		m := model{}
		start := base()
		now := start
		drawKey := func(rt *rapid.T) string { return rapid.SampledFrom(modelKeys).Draw(rt, "key") }
		drawValue := func(rt *rapid.T) []byte {
			// At least one byte: an empty record is never written by the
			// engine, and backends may return it as nil.
			return rapid.SliceOfN(rapid.Byte(), 1, 40).Draw(rt, "value")
		}
		drawExpiry := func(rt *rapid.T) int64 {
			switch rapid.IntRange(0, 3).Draw(rt, "expiryKind") {
			case 0:
				return 0 // never
			case 1:
				return -rapid.Int64Range(1, 10).Draw(rt, "negative") // never
			default:
				return now + rapid.Int64Range(-3, 12).Draw(rt, "expiresIn")
			}
		}
		check := func(rt *rapid.T, op, key string, got, want []byte) {
			if (got == nil) != (want == nil) || !bytes.Equal(got, want) {
				rt.Fatalf("%s(%q) = %s, want %s (now=base%+d)", op, key, show(got), show(want), now-start)
			}
		}

		actions := map[string]func(*rapid.T){
			"Put": func(rt *rapid.T) {
				k, v, e := drawKey(rt), drawValue(rt), drawExpiry(rt)
				if err := b.Put([]byte(k), v, e); err != nil {
					rt.Fatalf("Put(%q, %s, %d) = %v", k, show(v), e, err)
				}
				m[k] = record{value: v, expiresAt: e}
			},
			"Get": func(rt *rapid.T) {
				k := drawKey(rt)
				got, err := b.Get([]byte(k), now)
				if err != nil {
					rt.Fatalf("Get(%q) error = %v", k, err)
				}
				check(rt, "Get", k, got, m.get(k, now))
			},
			"Delete": func(rt *rapid.T) {
				k := drawKey(rt)
				if err := b.Delete([]byte(k)); err != nil {
					rt.Fatalf("Delete(%q) = %v", k, err)
				}
				delete(m, k)
			},
			"Advance": func(rt *rapid.T) {
				now += rapid.Int64Range(0, 5).Draw(rt, "step")
			},
			"": func(rt *rapid.T) {
				if !isCounter {
					return
				}
				if n, lo, hi := counter.Len(), m.live(now), len(m); n < lo || n > hi {
					rt.Fatalf("Len() = %d, want between %d (live keys) and %d (keys not deleted)", n, lo, hi)
				}
			},
		}
		if isStriped {
			locked := func(k string, f func(h uint64)) {
				h := backend.Hash([]byte(k))
				i := stripeOf(sb, h)
				sb.Lock(i)
				defer sb.Unlock(i)
				f(h)
			}
			actions["GetLocked"] = func(rt *rapid.T) {
				k := drawKey(rt)
				locked(k, func(h uint64) {
					got, err := sb.GetLocked(h, []byte(k), now)
					if err != nil {
						rt.Fatalf("GetLocked(%q) error = %v", k, err)
					}
					check(rt, "GetLocked", k, got, m.get(k, now))
				})
			}
			actions["StepLocked"] = func(rt *rapid.T) {
				// Read, then write back either the same slice changed in
				// place (a prefix of it, possibly) or a new record.
				k := drawKey(rt)
				e := drawExpiry(rt)
				inPlace := rapid.Bool().Draw(rt, "inPlace")
				var fresh []byte
				if !inPlace {
					fresh = drawValue(rt)
				}
				locked(k, func(h uint64) {
					got, err := sb.GetLocked(h, []byte(k), now)
					if err != nil {
						rt.Fatalf("GetLocked(%q) error = %v", k, err)
					}
					check(rt, "GetLocked", k, got, m.get(k, now))
					next := fresh
					if got != nil && inPlace {
						for i := range got {
							got[i]++
						}
						next = got[:1+len(got)/2]
					}
					if next == nil {
						next = []byte{1}
					}
					want := append([]byte{}, next...)
					if err := sb.PutLocked(h, []byte(k), next, e); err != nil {
						rt.Fatalf("PutLocked(%q, %s, %d) = %v", k, show(next), e, err)
					}
					m[k] = record{value: want, expiresAt: e}
				})
			}
			actions["PutLocked"] = func(rt *rapid.T) {
				// Several writes under one lock hold, without reading
				// first: a backend that remembers the last record it
				// found must notice each write.
				k, e := drawKey(rt), drawExpiry(rt)
				values := rapid.SliceOfN(rapid.SliceOfN(rapid.Byte(), 1, 40), 1, 3).Draw(rt, "values")
				locked(k, func(h uint64) {
					for _, v := range values {
						if err := sb.PutLocked(h, []byte(k), v, e); err != nil {
							rt.Fatalf("PutLocked(%q, %s, %d) = %v", k, show(v), e, err)
						}
						m[k] = record{value: v, expiresAt: e}
						got, err := sb.GetLocked(h, []byte(k), now)
						if err != nil {
							rt.Fatalf("GetLocked(%q) error = %v", k, err)
						}
						check(rt, "GetLocked", k, got, m.get(k, now))
					}
				})
			}
			actions["DeleteLocked"] = func(rt *rapid.T) {
				k := drawKey(rt)
				locked(k, func(h uint64) {
					if err := sb.DeleteLocked(h, []byte(k)); err != nil {
						rt.Fatalf("DeleteLocked(%q) = %v", k, err)
					}
				})
				delete(m, k)
			}
		}
		rt.Repeat(actions)

		// Finally every key reads as the model says, then and later.
		for _, k := range modelKeys {
			for _, at := range []int64{now, now + 100} {
				got, err := b.Get([]byte(k), at)
				if err != nil {
					rt.Fatalf("Get(%q) error = %v", k, err)
				}
				check(rt, "Get", k, got, m.get(k, at))
			}
		}
	})
}
