package algo_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
)

// TestConcurrencyModel: a concurrency limit, stepped through any trace of
// acquisitions, releases (of leases held, released already, expired, or
// never issued), clock steps (backwards too) and evictions of the record
// once its TTL has passed, answers as a model set of leases does: an
// acquisition is allowed exactly when fewer than the limit are live, so
// never more than the limit are; a release frees a slot exactly once, and
// only while its lease is live; an expired lease's slot comes back by
// itself; and no id is issued twice.
func TestConcurrencyModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.Int64Range(1, 6).Draw(t, "limit")
		hold := time.Duration(rapid.Int64Range(1, 50).Draw(t, "hold"))
		a := algo.MustNew(algo.ConcurrencyName, algo.Params{Limit: limit, Window: hold})
		now := rapid.Int64Range(-100, 100).Draw(t, "start")
		var rec []byte
		var expires int64          // when the store forgets rec
		model := map[int64]int64{} // id -> expiry of the leases held
		issued := map[int64]bool{}
		var ids []int64
		var evicted int64 = -1 << 62 // when the store last forgot the record
		var wrote int64 = -1 << 62   // the record's latest write: a clock behind it has not moved
		liveModel := func() int64 {
			n := int64(0)
			for _, e := range model {
				if e > max(now, wrote) {
					n++
				}
			}
			return n
		}
		for i := range rapid.IntRange(1, 80).Draw(t, "ops") {
			_ = i
			if rec != nil && expires <= now {
				// The store forgets the record (every lease in it has
				// expired): eviction is invisible.
				rec, wrote, evicted = nil, -1<<62, now
				for id, e := range model {
					if e > now {
						t.Fatalf("evicted at %d with lease %d live until %d", now, id, e)
					}
					delete(model, id)
				}
			}
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0: // time passes, or steps back a little
				now += rapid.Int64Range(-3, 30).Draw(t, "dt")
			case 1, 2: // acquire
				want := liveModel() < limit
				var d algo.Decision
				next := algo.StepInto(a, bytes.Clone(rec), now, 1, &d)
				if d.Allowed != want {
					t.Fatalf("at %d with %d live of %d: allowed %v", now, liveModel(), limit, d.Allowed)
				}
				if !d.Allowed {
					if next != nil {
						t.Fatalf("a denial wrote %x", next)
					}
					if d.RetryAfter <= 0 || d.Remaining != 0 {
						t.Fatalf("denial %+v", d)
					}
					// The earliest expiry frees a slot exactly then.
					first := int64(1 << 62)
					for _, e := range model {
						if e > max(now, wrote) {
							first = min(first, e)
						}
					}
					if got := now + int64(d.RetryAfter); got != first {
						t.Fatalf("RetryAfter %v points at %d, the first lease expires at %d", d.RetryAfter, got, first)
					}
					continue
				}
				if now < evicted {
					// The clock stepped back behind a record the store
					// forgot: the ids issued then are not known.
					clear(issued)
				}
				id, exp, ok := algo.LeaseOf(next)
				if !ok || exp != max(now, wrote)+int64(hold) || issued[id] {
					t.Fatalf("lease %d (expiry %d, ok %v; issued before: %v)", id, exp, ok, issued[id])
				}
				if d.Remaining != limit-liveModel()-1 || d.TTL <= 0 {
					t.Fatalf("allowed %+v with %d live", d, liveModel())
				}
				issued[id] = true
				ids = append(ids, id)
				model[id] = exp
				rec, expires, wrote = next, now+int64(d.TTL), max(now, wrote)
			case 3: // release
				var id int64
				if len(ids) > 0 && rapid.Bool().Draw(t, "known") {
					id = rapid.SampledFrom(ids).Draw(t, "id")
				} else {
					id = rapid.Int64Range(-200, 2000).Draw(t, "id")
				}
				e, held := model[id]
				want := int64(0)
				if held && e > max(now, wrote) {
					want = 1
				}
				var d algo.Decision
				next, freed := algo.Refund(a, bytes.Clone(rec), now, id, 1, &d)
				if freed != want {
					t.Fatalf("release of %d (held %v, expiry %d, now %d) freed %d", id, held, e, now, freed)
				}
				if freed == 1 {
					delete(model, id)
				}
				if next != nil {
					rec, expires, wrote = next, now+int64(d.TTL), max(now, wrote)
				}
				if d.Remaining != limit-liveModel() {
					t.Fatalf("after the release: %+v with %d live", d, liveModel())
				}
			}
			if n := liveModel(); n > limit {
				t.Fatalf("%d leases live, limit %d", n, limit)
			}
		}
	})
}

func TestConcurrencyParams(t *testing.T) {
	_, err := algo.New(algo.ConcurrencyName, algo.Params{Limit: algo.MaxConcurrencyLimit + 1, Window: time.Second})
	var pe *algo.ParamError
	if !errors.As(err, &pe) || pe.Field != "limit" {
		t.Fatalf("limit above the bound: %v", err)
	}
	if _, err := algo.New(algo.ConcurrencyName, algo.Params{Limit: 2, Window: time.Second, Burst: 3}); !errors.As(err, &pe) || pe.Field != "burst" {
		t.Fatalf("burst: %v", err)
	}
	a := algo.MustNew(algo.ConcurrencyName, algo.Params{Limit: algo.MaxConcurrencyLimit, Window: time.Hour})
	var rec []byte
	var d algo.Decision
	for i := range algo.MaxConcurrencyLimit {
		rec = algo.StepInto(a, rec, int64(i), 1, &d)
	}
	if algo.StepInto(a, rec, algo.MaxConcurrencyLimit, 1, &d); d.Allowed {
		t.Fatal("allowed past the limit")
	}
	if len(rec) != 17+16*algo.MaxConcurrencyLimit {
		t.Fatalf("a full record is %d bytes", len(rec))
	}
	if algo.ConcurrencyName.Known() {
		t.Fatal("Known, as a rate algorithm")
	}
}
