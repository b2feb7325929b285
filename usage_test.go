package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/bolt"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/engine"
)

// usageAlgorithms are the algorithms a rule may name.
func usageAlgorithms() []algo.Name { return slices.Clone(algo.Names) }

// usageRule is a user rule of algorithm a, 5 a minute, on prefix.
func usageRule(name, prefix string, a algo.Name) sluice.Rule {
	return sluice.Rule{Name: name, PathPrefix: prefix, Scope: sluice.ScopeUser, Algorithm: a, Limit: 5, Window: time.Minute}
}

// usageStores opens an engine on each kind of store, on a fake clock at t0:
// the memory table, Pebble, bbolt, and a compare-and-swap store (Redis's
// path through the engine).
func usageStores() map[string]func(t *testing.T) (*engine.Engine, *engine.FakeClock) {
	open := func(t *testing.T, b backend.Backend, clock *engine.FakeClock) *engine.Engine {
		e, err := engine.New(b, &engine.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	return map[string]func(t *testing.T) (*engine.Engine, *engine.FakeClock){
		"memory": func(t *testing.T) (*engine.Engine, *engine.FakeClock) {
			clock := engine.NewFakeClock(t0)
			return open(t, memoryStore(), clock), clock
		},
		"pebble": func(t *testing.T) (*engine.Engine, *engine.FakeClock) {
			s, err := pebble.Open(filepath.Join(t.TempDir(), "p"), nil)
			if err != nil {
				t.Fatal(err)
			}
			clock := engine.NewFakeClock(t0)
			return open(t, s, clock), clock
		},
		"bolt": func(t *testing.T) (*engine.Engine, *engine.FakeClock) {
			s, err := bolt.Open(filepath.Join(t.TempDir(), "b"), nil)
			if err != nil {
				t.Fatal(err)
			}
			clock := engine.NewFakeClock(t0)
			return open(t, s, clock), clock
		},
		"swap": func(t *testing.T) (*engine.Engine, *engine.FakeClock) {
			clock := engine.NewFakeClock(t0)
			return open(t, backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now}), clock), clock
		},
	}
}

// memoryStore returns a memory store that sweeps nothing by itself.
func memoryStore() backend.Backend { return memory.New(&memory.Options{SweepInterval: -1}) }

// For every algorithm on every store: a caller never seen reads as full and
// gets no record; after some requests, what Usage says is what the next
// decision sees (its Remaining one less than Usage's, or its denial and
// Retry-After), and reading it spends nothing.
func TestUsageEqualsNextDecision(t *testing.T) {
	for store, open := range usageStores() {
		for _, a := range usageAlgorithms() {
			t.Run(store+"/"+string(a), func(t *testing.T) {
				e, clock := open(t)
				d := newTestDoor(t, e, nil)
				rs := mustRuleset(t, []sluice.Rule{usageRule("orders", "/orders", a)}, nil, "")
				ctx := context.Background()
				alice := call{user: "alice"}
				u, err := d.Usage(ctx, rs, "GET", "/orders", alice)
				if err != nil {
					t.Fatal(err)
				}
				if len(u.Limits) != 1 {
					t.Fatalf("Usage: %d limits, want 1", len(u.Limits))
				}
				if l := u.Limits[0]; l.Rule.Name() != "orders" || l.Key != "user:alice" || l.Remaining != 5 || l.Limit != 5 || !l.Allowed || l.Reset != 0 || l.InUse != 0 {
					t.Errorf("fresh caller: %+v, want orders user:alice, 5 of 5 left, allowed, full", l)
				}
				if rec, err := e.Record(ctx, rs.Rule("orders").Limit(), "user:alice"); err != nil || rec != nil {
					t.Fatalf("Usage of a caller never seen left a record %x (%v)", rec, err)
				}
				for step := range 8 {
					u, err := d.Usage(ctx, rs, "GET", "/orders", alice)
					if err != nil {
						t.Fatal(err)
					}
					again, _ := d.Usage(ctx, rs, "GET", "/orders", alice)
					if !equalUsage(u, again) {
						t.Fatalf("step %d: reading twice differs: %+v then %+v", step, u.Limits[0], again.Limits[0])
					}
					lu := u.Limits[0]
					out := d.Decide(ctx, rs, "GET", "/orders", alice)
					if lu.Allowed != (out.Verdict == sluice.Allowed) {
						t.Fatalf("step %d: usage allowed=%v (%+v), then the request was %v", step, lu.Allowed, lu, out.Verdict)
					}
					if lu.Allowed && out.Decision.Remaining != lu.Remaining-1 {
						t.Errorf("step %d: usage remaining %d, the next request left %d, want %d", step, lu.Remaining, out.Decision.Remaining, lu.Remaining-1)
					}
					if !lu.Allowed && (lu.Remaining != 0 || out.Decision.RetryAfter != lu.RetryAfter) {
						t.Errorf("step %d: usage %+v, denied with retry %v", step, lu, out.Decision.RetryAfter)
					}
					if lu.InUse != 0 {
						t.Errorf("step %d: %s reports %d in use", step, a, lu.InUse)
					}
					if step%3 == 2 {
						clock.Advance(7 * time.Second)
					}
				}
			})
		}
	}
}

// A concurrency limit's state is the slots held and free, on every store:
// each Acquire takes one, each Release gives it back, and reading takes
// none and writes no record for a key never seen.
func TestPeekStateConcurrency(t *testing.T) {
	for store, open := range usageStores() {
		t.Run(store, func(t *testing.T) {
			e, clock := open(t)
			ctx := context.Background()
			l := engine.Limit{Namespace: "uploads", Algorithm: algo.MustNew(algo.ConcurrencyName, algo.Params{Limit: 3, Window: time.Minute})}
			st, err := sluice.PeekState(ctx, e, l, "user:alice", 1)
			if err != nil {
				t.Fatal(err)
			}
			if st.Limit != 3 || st.Remaining != 3 || st.InUse != 0 || !st.Allowed || st.Reset != 0 {
				t.Errorf("never seen: %+v, want 3 free of 3", st)
			}
			if rec, err := e.Record(ctx, l, "user:alice"); err != nil || rec != nil {
				t.Fatalf("PeekState of a key never seen left a record %x (%v)", rec, err)
			}
			var leases []*engine.Lease
			for held := int64(1); held <= 4; held++ {
				ls, err := e.Acquire(ctx, l, "user:alice")
				if err != nil {
					t.Fatal(err)
				}
				leases = append(leases, ls)
				clock.Advance(time.Second)
				st, err := sluice.PeekState(ctx, e, l, "user:alice", 1)
				if err != nil {
					t.Fatal(err)
				}
				want := min(held, 3)
				if st.InUse != want || st.Remaining != 3-want || st.Allowed != (want < 3) {
					t.Errorf("%d acquired: %+v, want %d in use", held, st, want)
				}
				if first := time.Minute - time.Duration(held)*time.Second; want == 3 && st.RetryAfter != first {
					t.Errorf("full: retry after %v, want when the first lease expires (%v)", st.RetryAfter, first)
				}
			}
			if _, err := leases[0].Release(ctx); err != nil {
				t.Fatal(err)
			}
			if st, err := sluice.PeekState(ctx, e, l, "user:alice", 1); err != nil || st.InUse != 2 || st.Remaining != 1 {
				t.Errorf("after a release: %+v (%v), want 2 in use, 1 free", st, err)
			}
		})
	}
}

// A concurrency rule's usage through a Door: the slots the caller's
// requests hold, and those a release gives back.
func TestUsageConcurrencyRule(t *testing.T) {
	e := newTestEngine(t)
	d := newTestDoor(t, e, nil)
	rs := mustRuleset(t, []sluice.Rule{{Name: "uploads", PathPrefix: "/up", Scope: sluice.ScopeUser, Algorithm: algo.ConcurrencyName, Limit: 3, MaxHold: time.Minute}}, nil, "")
	ctx := context.Background()
	alice := call{user: "alice"}
	var held []*sluice.Held
	for i := range 2 {
		out := d.Decide(ctx, rs, "POST", "/up", alice)
		if out.Verdict != sluice.Allowed || out.Held == nil {
			t.Fatalf("upload %d: %v, want allowed, holding a slot", i, out.Verdict)
		}
		held = append(held, out.Held)
	}
	u, err := d.Usage(ctx, rs, "POST", "/up", alice)
	if err != nil {
		t.Fatal(err)
	}
	if l := u.Limits[0]; l.InUse != 2 || l.Remaining != 1 || l.Limit != 3 || !l.Allowed {
		t.Errorf("two uploads held: %+v, want 2 in use, 1 free", l.LimitState)
	}
	d.Release(ctx, held[0])
	if u, _ := d.Usage(ctx, rs, "POST", "/up", alice); u.Limits[0].InUse != 1 {
		t.Errorf("after a release: %+v, want 1 in use", u.Limits[0].LimitState)
	}
}

// A calendar rule's usage resets at its real boundary: a month in Berlin
// ends at midnight there, 23:00 UTC on the last day of January.
func TestUsageCalendar(t *testing.T) {
	e := newTestEngine(t)
	d := newTestDoor(t, e, nil)
	rs := mustRuleset(t, []sluice.Rule{{Name: "monthly", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: algo.FixedWindowName, Limit: 1000, Calendar: "month", Timezone: "Europe/Berlin"}}, nil, "")
	ctx := context.Background()
	d.Decide(ctx, rs, "GET", "/", call{user: "acme"})
	u, err := d.Usage(ctx, rs, "GET", "/", call{user: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	end := time.Date(2025, 1, 31, 23, 0, 0, 0, time.UTC)
	if l := u.Limits[0]; l.Remaining != 999 || !u.At.Add(l.Reset).Equal(end) {
		t.Errorf("monthly: %+v, resets at %v, want 999 left until %v", l.LimitState, u.At.Add(l.Reset), end)
	}
}

// tickingClock is a clock that moves on by a microsecond every time it is
// read, as a real one does between two reads.
type tickingClock struct{ now atomic.Int64 }

func (c *tickingClock) Now() int64 { return c.now.Add(int64(time.Microsecond)) }

// Usage reads the clock once: on a clock that moves between reads, each
// calendar rule's Reset still counts from the answer's At, so At plus Reset
// is the rule's boundary to the nanosecond (a UTC day, a Berlin month, a
// day starting at 06:00 in New York), and RFC 3339 shows it whole.
func TestUsageOneInstant(t *testing.T) {
	clock := &tickingClock{}
	clock.now.Store(time.Date(2025, 1, 10, 22, 59, 59, 0, time.UTC).UnixNano())
	e, err := engine.New(memoryStore(), &engine.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	d := newTestDoor(t, e, nil)
	cal := func(name, calendar, zone, anchor string) sluice.Rule {
		return sluice.Rule{Name: name, PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: algo.FixedWindowName, Limit: 1000, Calendar: calendar, Timezone: zone, Anchor: anchor}
	}
	rs := mustRuleset(t, []sluice.Rule{
		cal("day", "day", "UTC", ""),
		cal("month", "month", "Europe/Berlin", ""),
		cal("morning", "day", "America/New_York", "06:00"),
	}, nil, sluice.MatchAll)
	ctx := context.Background()
	if dec := d.Decide(ctx, rs, "GET", "/", call{user: "acme"}); dec.Verdict != sluice.Allowed {
		t.Fatalf("first request denied: %+v", dec)
	}
	want := map[string]time.Time{
		"day":     time.Date(2025, 1, 11, 0, 0, 0, 0, time.UTC),
		"month":   time.Date(2025, 1, 31, 23, 0, 0, 0, time.UTC),
		"morning": time.Date(2025, 1, 11, 11, 0, 0, 0, time.UTC),
	}
	for _, all := range []bool{false, true} {
		var u sluice.Usage
		if all {
			u, err = d.UsageAll(ctx, rs, call{user: "acme"})
		} else {
			u, err = d.Usage(ctx, rs, "GET", "/", call{user: "acme"})
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(u.Limits) != len(want) {
			t.Fatalf("all=%v: %d limits, want %d", all, len(u.Limits), len(want))
		}
		for _, l := range u.Limits {
			name := l.Rule.Name()
			if got := u.At.Add(l.Reset); !got.Equal(want[name]) || l.Remaining != 999 {
				t.Errorf("all=%v: %s: %d left until %v, want 999 until %v", all, name, l.Remaining, got.UTC().Format(time.RFC3339Nano), want[name].Format(time.RFC3339Nano))
			}
		}
	}
}

// equalUsage reports whether two readings of the same state agree.
func equalUsage(a, b sluice.Usage) bool {
	if len(a.Limits) != len(b.Limits) {
		return false
	}
	for i := range a.Limits {
		x, y := a.Limits[i], b.Limits[i]
		if x.Rule != y.Rule || x.Key != y.Key || x.Remaining != y.Remaining || x.Allowed != y.Allowed || x.RetryAfter != y.RetryAfter || x.Reset != y.Reset || x.InUse != y.InUse {
			return false
		}
	}
	return true
}

// Usage reads the rules a request would be decided under (the caller's
// plan, the caller's override, the shadow rules beside the enforced ones,
// an exempt caller marked so); UsageAll every rule that applies to the
// caller whatever the request. Neither spends or writes anything.
func TestUsageRules(t *testing.T) {
	e := newTestEngine(t)
	d := newTestDoor(t, e, func(c *sluice.DoorConfig[call]) {
		c.Exempt = func(key string) bool { return key == "user:ops" }
	})
	orders := tokenRule("orders", "/orders", 10)
	gold := tokenRule("orders-gold", "/orders", 100)
	gold.Plan = "gold"
	search := tokenRule("search", "/search", 20)
	trial := tokenRule("trial", "/", 3)
	trial.Shadow = true
	def := tokenRule("default", "", 50)
	rs := mustRuleset(t, []sluice.Rule{orders, gold, search, trial}, &def, "")
	rs, err := rs.WithOverrides([]sluice.Override{{Rule: "orders", Key: "user:bob", Limit: 40}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	names := func(u sluice.Usage) string {
		var s []string
		for _, l := range u.Limits {
			s = append(s, fmt.Sprintf("%s:%d", l.Rule.Name(), l.Limit))
			if l.Override {
				s[len(s)-1] += "!"
			}
			if l.Exempt {
				s[len(s)-1] += "(exempt)"
			}
		}
		return fmt.Sprint(s)
	}
	for _, tt := range []struct {
		c          call
		path, want string
		all        bool
	}{
		{call{user: "alice"}, "/orders/1", "[orders:10 trial:3]", false},
		{call{user: "alice", plan: "gold"}, "/orders/1", "[orders-gold:100 trial:3]", false},
		{call{user: "bob"}, "/orders", "[orders:40! trial:3]", false},
		{call{user: "alice"}, "/elsewhere", "[default:50 trial:3]", false},
		{call{user: "ops"}, "/orders", "[orders:0(exempt) trial:3]", false},
		{call{user: "alice"}, "", "[orders:10 search:20 default:50 trial:3]", true},
		{call{user: "alice", plan: "gold"}, "", "[orders-gold:100 search:20 default:50 trial:3]", true},
	} {
		var u sluice.Usage
		if tt.all {
			u, err = d.UsageAll(ctx, rs, tt.c)
		} else {
			u, err = d.Usage(ctx, rs, "GET", tt.path, tt.c)
		}
		if err != nil {
			t.Fatalf("%+v %s: %v", tt.c, tt.path, err)
		}
		if got := names(u); got != tt.want {
			t.Errorf("%+v %q: limits %s, want %s", tt.c, tt.path, got, tt.want)
		}
		if u.Plan != tt.c.plan || !u.At.Equal(t0) {
			t.Errorf("%+v: plan %q at %v, want %q at %v", tt.c, u.Plan, u.At, tt.c.plan, t0)
		}
	}
	if n := e.Len(); n != 0 {
		t.Errorf("the engine holds %d records after reading usage only, want 0", n)
	}
	// A caller the door cannot identify is a *KeyError naming the rule.
	_, err = d.Usage(ctx, rs, "GET", "/orders", call{})
	var ke *sluice.KeyError
	if !errors.As(err, &ke) || ke.Rule == nil || ke.Rule.Name() != "orders" || !errors.Is(err, errNoUser) {
		t.Errorf("Usage of no caller: %v, want a KeyError of rule orders", err)
	}
}

// Interleaving Usage between decisions changes none of them: for random
// sequences of requests, costs and clock steps, the decisions made with
// usage read between them are the decisions made without.
func TestUsageSpendsNothing(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		a := rapid.SampledFrom(usageAlgorithms()).Draw(rt, "algorithm")
		rs, err := sluice.NewRuleset([]sluice.Rule{usageRule("r", "/", a)}, nil, "")
		if err != nil {
			rt.Fatal(err)
		}
		type run struct {
			d     *sluice.Door[call]
			clock *engine.FakeClock
		}
		var runs [2]run
		for i := range runs {
			clock := engine.NewFakeClock(t0)
			e, err := engine.New(memoryStore(), &engine.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				rt.Fatal(err)
			}
			defer e.Close()
			d, err := sluice.NewDoor(sluice.DoorConfig[call]{Engine: e, Key: callKey, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				rt.Fatal(err)
			}
			runs[i] = run{d, clock}
		}
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for i := range steps {
			who := call{user: rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "user")}
			adv := time.Duration(rapid.IntRange(0, 20).Draw(rt, "advance")) * time.Second
			peek := rapid.Bool().Draw(rt, "peek")
			var outs [2]sluice.Outcome
			for j, r := range runs {
				r.clock.Advance(adv)
				if j == 1 && peek {
					if _, err := r.d.UsageAll(context.Background(), rs, who); err != nil {
						rt.Fatal(err)
					}
				}
				outs[j] = r.d.Decide(context.Background(), rs, "GET", "/", who)
			}
			if outs[0].Verdict != outs[1].Verdict || outs[0].Decision != outs[1].Decision {
				rt.Fatalf("step %d: without usage %v %+v, with %v %+v", i, outs[0].Verdict, outs[0].Decision, outs[1].Verdict, outs[1].Decision)
			}
		}
	})
}
