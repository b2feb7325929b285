package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/engine"
)

// modelReservation is a reservation as the model made it.
type modelReservation struct {
	l        engine.Limit
	key      string
	estimate int64
	at       int64
}

// record returns a copy of k's live record at now, or nil.
func (m *model) record(k string, now int64) []byte {
	if r, ok := m.recs[k]; ok && r.expiresAt > now {
		return append([]byte(nil), r.value...)
	}
	return nil
}

// store keeps next under k as the engine stores it.
func (m *model) store(k string, next []byte, now int64, d algo.Decision) {
	switch {
	case next == nil && !d.CorruptState:
	case next == nil || d.TTL <= 0:
		delete(m.recs, k)
	default:
		m.recs[k] = modelRecord{append([]byte(nil), next...), now + int64(d.TTL)}
	}
}

// settle is what the model does for a Settle of r at its actual cost.
func (m *model) settle(r modelReservation, now, actual int64) engine.Settlement {
	var s engine.Settlement
	delta := actual - r.estimate
	if delta == 0 {
		return s
	}
	k := string(engine.AppendKey(nil, r.l.Namespace, r.key))
	state := m.record(k, now)
	var next []byte
	if delta > 0 {
		next, s.Charged = algo.Charge(r.l.Algorithm, state, now, delta, &s.Decision)
	} else {
		next, s.Refunded = algo.Refund(r.l.Algorithm, state, now, r.at, -delta, &s.Decision)
	}
	m.store(k, next, now, s.Decision)
	return s
}

// settleStores are the stores the settle property runs over: every engine
// test's, and Pebble and bbolt in temporary directories.
func settleStores(t *testing.T) []store {
	out := append([]store(nil), backends...)
	for _, d := range durables {
		out = append(out, store{d.name, func(engine.Clock) backend.Backend { return d.open(t, t.TempDir()) }})
	}
	return out
}

// fewerChecksOnDiskUnderRace divides rapid's checks by 4 for the rest of
// t, a subtest of one of settleStores, under the race detector when its
// store is on disk (Pebble, bbolt): each check opens a store in a
// directory of its own, most of the property's cost there (2.5-6.3 s a
// store against 0.2 s in memory), and the race detector watches the
// engine's goroutines in the first checks as in the last. make full runs
// all of rapid's checks in a normal build.
func fewerChecksOnDiskUnderRace(t *testing.T, store string) {
	t.Helper()
	for _, d := range durables {
		if d.name == store {
			fewerChecksUnderRace(t, 4)
		}
	}
}

// TestReserveSettleModel drives the engine over every store through random
// interleavings of requests, reservations and settles (charges past the
// limit, refunds, second settles), with a clock that moves (backwards too):
// every decision and every settlement equals the map model's, which steps,
// charges and refunds with package algo directly. What algo's own model
// test proves of those (the spend equals the actual costs less what could
// not be taken back, debt denied until it has refilled) then holds through
// the engine on each store.
func TestReserveSettleModel(t *testing.T) {
	for _, bk := range settleStores(t) {
		t.Run(bk.name, func(t *testing.T) {
			fewerChecksOnDiskUnderRace(t, bk.name)
			rapid.Check(t, func(rt *rapid.T) {
				limits := genLimits(rt)
				clock := engine.NewFakeClock(t0)
				e, err := engine.New(bk.open(clock), &engine.Options{Clock: clock, Stripes: 4, FlushInterval: time.Hour})
				if err != nil {
					rt.Fatal(err)
				}
				defer e.Close()
				ctx := context.Background()
				m := &model{recs: map[string]modelRecord{}}
				type pending struct {
					r    *engine.Reservation
					want modelReservation
				}
				var open []pending
				for i := range rapid.IntRange(1, 100).Draw(rt, "ops") {
					op := rapid.IntRange(0, 5).Draw(rt, "op")
					switch {
					case op == 0:
						clock.Advance(genStep(rt))
					case op == 1:
						l := rapid.SampledFrom(limits).Draw(rt, "limit")
						key := rapid.SampledFrom(propKeys).Draw(rt, "key")
						cost := rapid.Int64Range(1, l.Algorithm.Params().Capacity()).Draw(rt, "cost")
						got, err := e.Apply(ctx, l, key, cost)
						if err != nil {
							rt.Fatalf("op %d: %v", i, err)
						}
						if want := m.apply(l, key, clock.Now(), cost); got != want {
							rt.Fatalf("op %d: Apply %s %q cost %d:\n got %+v\nwant %+v", i, l.Namespace, key, cost, got, want)
						}
					case op < 4 || len(open) == 0:
						l := rapid.SampledFrom(limits).Draw(rt, "limit")
						key := rapid.SampledFrom(propKeys).Draw(rt, "key")
						est := rapid.Int64Range(1, l.Algorithm.Params().Capacity()).Draw(rt, "estimate")
						r, err := e.Reserve(ctx, l, key, est)
						if err != nil {
							rt.Fatalf("op %d: Reserve: %v", i, err)
						}
						now := clock.Now()
						want := m.apply(l, key, now, est)
						if r.Decision != want || r.Estimate != est || r.Key != key {
							rt.Fatalf("op %d: Reserve %s %q estimate %d:\n got %+v\nwant %+v", i, l.Namespace, key, est, r.Decision, want)
						}
						if !want.Allowed {
							if _, err := r.Settle(ctx, est); !errors.Is(err, engine.ErrNotReserved) {
								rt.Fatalf("op %d: Settle of a denied reservation: %v, want ErrNotReserved", i, err)
							}
							continue
						}
						if at := algo.SpentAt(l.Algorithm, now, &want); r.At != at {
							rt.Fatalf("op %d: reservation at %d, want %d", i, r.At, at)
						}
						open = append(open, pending{r, modelReservation{l, key, est, r.At}})
					default:
						j := rapid.IntRange(0, len(open)-1).Draw(rt, "which")
						p := open[j]
						open = append(open[:j], open[j+1:]...)
						actual := rapid.Int64Range(0, 3*p.want.l.Algorithm.Params().Capacity()).Draw(rt, "actual")
						got, err := p.r.Settle(ctx, actual)
						if err != nil {
							rt.Fatalf("op %d: Settle: %v", i, err)
						}
						if want := m.settle(p.want, clock.Now(), actual); got != want {
							rt.Fatalf("op %d: Settle %s %q estimate %d actual %d at %d (reserved at %d):\n got %+v\nwant %+v", i, p.want.l.Namespace, p.want.key, p.want.estimate, actual, clock.Now(), p.want.at, got, want)
						}
						if _, err := p.r.Settle(ctx, actual); !errors.Is(err, engine.ErrSettled) {
							rt.Fatalf("op %d: second Settle: %v, want ErrSettled", i, err)
						}
					}
				}
			})
		})
	}
}

// TestSettleTimeline walks one caller of a 100-token-per-minute token
// bucket through reservations settled above and below their estimates, on
// the memory store.
func TestSettleTimeline(t *testing.T) {
	clock := engine.NewFakeClock(t0)
	e := openEngine(t, backends[0].open, clock)
	l := limit(algo.TokenBucketName, algo.Params{Limit: 100, Window: time.Minute}, "tpm")
	ctx := context.Background()

	r1, err := e.Reserve(ctx, l, "key", 60)
	if err != nil || !r1.Decision.Allowed || r1.Decision.Remaining != 40 {
		t.Fatalf("Reserve(60) = %+v, %v; want allowed, 40 left", r1, err)
	}
	s, err := r1.Settle(ctx, 10) // used 10: 50 back
	if err != nil || s.Refunded != 50 || s.Decision.Remaining != 90 {
		t.Fatalf("Settle(10) = %+v, %v; want 50 refunded, 90 left", s, err)
	}
	r2, _ := e.Reserve(ctx, l, "key", 50)
	s, err = r2.Settle(ctx, 200) // used 200: 150 more, but the debt stops at 200 spent
	if err != nil || s.Charged != 140 || s.Decision.Remaining != 0 {
		t.Fatalf("Settle(200) = %+v, %v; want 140 charged (to 200 spent), 0 left", s, err)
	}
	d, _ := e.Apply(ctx, l, "key", 1)
	if d.Allowed || d.RetryAfter != 60600*time.Millisecond {
		t.Fatalf("Apply in debt = %+v; want denied for 60.6s (101 tokens at 100/min)", d)
	}
	clock.Advance(d.RetryAfter)
	if d, _ := e.Apply(ctx, l, "key", 1); !d.Allowed {
		t.Fatalf("Apply after RetryAfter = %+v; want allowed", d)
	}
}

// TestConcurrentSettlesSumExactly: goroutines reserving and settling on one
// key at once, on a frozen clock with room for every reservation, leave
// the key holding exactly the sum of the actual costs, on every store:
// settles interleave with each other and with reservations without losing
// or doubling one.
func TestConcurrentSettlesSumExactly(t *testing.T) {
	const workers, each, capacity = 8, 25, 1_000_000
	for _, bk := range settleStores(t) {
		t.Run(bk.name, func(t *testing.T) {
			clock := engine.NewFakeClock(t0)
			e, err := engine.New(bk.open(clock), &engine.Options{Clock: clock, Stripes: 4, FlushInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			for _, name := range algo.Names {
				p := algo.Params{Limit: capacity, Window: time.Hour}
				if name == algo.SlidingLogName {
					p.Limit = algo.MaxSlidingLogLimit
				}
				l := engine.Limit{Namespace: string(name), Algorithm: algo.MustNew(name, p)}
				errs := make(chan error, workers)
				var sum [workers]int64
				for w := range workers {
					go func() {
						for i := range each {
							est := int64(1 + (w+i)%7)
							actual := int64((w*3 + i*5) % 11) // below, at and above the estimate
							r, err := e.Reserve(context.Background(), l, "k", est)
							if err == nil && !r.Decision.Allowed {
								err = errors.New("denied")
							}
							if err == nil {
								_, err = r.Settle(context.Background(), actual)
							}
							if err != nil {
								errs <- err
								return
							}
							sum[w] += actual
						}
						errs <- nil
					}()
				}
				for range workers {
					if err := <-errs; err != nil {
						t.Fatalf("%s: %v", name, err)
					}
				}
				var total int64
				for _, s := range sum {
					total += s
				}
				d, err := e.Peek(context.Background(), l, "k", 1)
				if err != nil {
					t.Fatal(err)
				}
				if want := algo.Capacity(l.Algorithm) - total - 1; d.Remaining != want {
					t.Fatalf("%s: after settles of %d in all, a request of 1 leaves %d; want %d", name, total, d.Remaining, want)
				}
			}
		})
	}
}

// TestReserveIntoDoesNotAllocate: a reservation into the caller's
// Reservation and its settle, on a hot key of the memory store, allocate
// nothing; a reused Reservation settles once per reservation.
func TestReserveIntoDoesNotAllocate(t *testing.T) {
	clock := engine.NewFakeClock(t0)
	e := openEngine(t, backends[0].open, clock)
	l := limit(algo.TokenBucketName, algo.Params{Limit: 1_000_000, Window: time.Hour}, "tpm")
	ctx := context.Background()
	var r engine.Reservation
	allocs := testing.AllocsPerRun(200, func() {
		if err := e.ReserveInto(ctx, l, "key", 10, &r); err != nil || !r.Decision.Allowed {
			panic(err)
		}
		if _, err := r.Settle(ctx, 4); err != nil {
			panic(err)
		}
		if _, err := r.Settle(ctx, 4); !errors.Is(err, engine.ErrSettled) {
			panic(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("ReserveInto and Settle allocate %v times", allocs)
	}
	d, _ := e.Peek(ctx, l, "key", 1)
	if want := int64(1_000_000 - 201*4 - 1); d.Remaining != want {
		t.Fatalf("after 201 reservations of 10 settled at 4, a request of 1 leaves %d; want %d", d.Remaining, want)
	}
}
