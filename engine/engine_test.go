package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/engine"
)

var fivePerMinute = algo.Params{Limit: 5, Window: time.Minute}

func TestApplyStepsThroughTheBackend(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			clock := engine.NewFakeClock(t0)
			e := newEngine(t, bk.open(clock), clock)
			orders := limit(algo.TokenBucketName, fivePerMinute, "orders-write")
			steps := []struct {
				advance   time.Duration
				allowed   bool
				remaining int64
				retry     time.Duration
			}{
				{0, true, 4, 0},
				{0, true, 3, 0},
				{0, true, 2, 0},
				{0, true, 1, 0},
				{0, true, 0, 0},
				{0, false, 0, 12 * time.Second},
				{11 * time.Second, false, 0, time.Second},
				{time.Second, true, 0, 0},
				{0, false, 0, 12 * time.Second},
			}
			for i, s := range steps {
				clock.Advance(s.advance)
				d, err := e.Apply(context.Background(), orders, "u-1", 1)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if d.Allowed != s.allowed || d.Remaining != s.remaining || d.RetryAfter != s.retry {
					t.Errorf("step %d: Apply = allowed %v remaining %d retry %v, want %v %d %v",
						i, d.Allowed, d.Remaining, d.RetryAfter, s.allowed, s.remaining, s.retry)
				}
			}
		})
	}
}

func TestNamespacesNeverShareACounter(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			e := openEngine(t, bk.open, engine.NewFakeClock(t0))
			strict := limit(algo.FixedWindowName, algo.Params{Limit: 1, Window: time.Minute}, "strict")
			loose := limit(algo.FixedWindowName, algo.Params{Limit: 1, Window: time.Minute}, "loose")
			for _, l := range []engine.Limit{strict, loose} {
				if d, _ := e.Apply(context.Background(), l, "u-1", 1); !d.Allowed {
					t.Fatalf("%s: first request denied", l.Namespace)
				}
			}
			// A namespace that is a prefix of another, with a key that
			// completes it, is still another counter.
			a := limit(algo.FixedWindowName, algo.Params{Limit: 1, Window: time.Minute}, "ab")
			b := limit(algo.FixedWindowName, algo.Params{Limit: 1, Window: time.Minute}, "a")
			if d, _ := e.Apply(context.Background(), a, "c", 1); !d.Allowed {
				t.Fatal("ab/c denied")
			}
			if d, _ := e.Apply(context.Background(), b, "bc", 1); !d.Allowed {
				t.Fatal("a/bc shares ab/c's counter")
			}
		})
	}
}

func TestPeekDoesNotSpend(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			e := openEngine(t, bk.open, engine.NewFakeClock(t0))
			for _, name := range algo.Names {
				l := limit(name, algo.Params{Limit: 2, Window: time.Second}, string(name))
				if _, err := e.Apply(context.Background(), l, "k", 1); err != nil {
					t.Fatal(err)
				}
				for range 3 {
					d, err := e.Peek(context.Background(), l, "k", 1)
					if err != nil || !d.Allowed || d.Remaining != 0 {
						t.Fatalf("%s: Peek = %+v, %v; want allowed with 0 remaining", name, d, err)
					}
				}
				if d, _ := e.Apply(context.Background(), l, "k", 1); !d.Allowed {
					t.Fatalf("%s: Peek spent the budget", name)
				}
				if d, _ := e.Apply(context.Background(), l, "k", 1); d.Allowed {
					t.Fatalf("%s: third request allowed", name)
				}
			}
		})
	}
}

func TestResetForgetsTheKey(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			e := openEngine(t, bk.open, engine.NewFakeClock(t0))
			l := limit(algo.SlidingLogName, algo.Params{Limit: 1, Window: time.Hour}, "login")
			e.Apply(context.Background(), l, "u", 1)
			if d, _ := e.Apply(context.Background(), l, "u", 1); d.Allowed {
				t.Fatal("second request allowed")
			}
			if err := e.Reset(context.Background(), l, "u"); err != nil {
				t.Fatal(err)
			}
			if d, _ := e.Apply(context.Background(), l, "u", 1); !d.Allowed {
				t.Fatal("request after Reset denied")
			}
		})
	}
}

func TestApplyAllSpendsNothingUnlessAllAllow(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			e := openEngine(t, bk.open, engine.NewFakeClock(t0))
			user := limit(algo.TokenBucketName, algo.Params{Limit: 10, Window: time.Minute}, "per-user")
			global := limit(algo.FixedWindowName, algo.Params{Limit: 2, Window: time.Minute}, "global")
			reqs := func(key string) []engine.Request {
				return []engine.Request{{Limit: user, Key: key, Cost: 1}, {Limit: global, Key: "all", Cost: 1}}
			}
			for i, want := range []bool{true, true, false, false} {
				ds, all, err := e.ApplyAll(context.Background(), reqs("u-1"))
				if err != nil {
					t.Fatal(err)
				}
				if all != want {
					t.Fatalf("call %d: all = %v, want %v", i, all, want)
				}
				if len(ds) != 2 {
					t.Fatalf("call %d: %d decisions", i, len(ds))
				}
			}
			// The two denied calls must not have charged the user's bucket:
			// 10, less 2 spent, less the peeked request itself.
			d, _ := e.Peek(context.Background(), user, "u-1", 1)
			if d.Remaining != 7 {
				t.Fatalf("user remaining after 2 spent + 2 refused = %d, want 7 (a denial by the global rule charged the user rule)", d.Remaining)
			}
		})
	}
}

func TestApplyAllSameKeyTwice(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) { testApplyAllSameKeyTwice(t, bk) })
	}
}

func testApplyAllSameKeyTwice(t *testing.T, bk store) {
	e := openEngine(t, bk.open, engine.NewFakeClock(t0))
	l := limit(algo.FixedWindowName, algo.Params{Limit: 3, Window: time.Minute}, "x")
	req := engine.Request{Limit: l, Key: "k", Cost: 2}
	if _, all, _ := e.ApplyAll(context.Background(), []engine.Request{req, req}); all {
		t.Fatal("cost 2 twice against 3 allowed: the second step did not see the first")
	}
	if d, _ := e.Peek(context.Background(), l, "k", 3); !d.Allowed {
		t.Fatal("a refused ApplyAll spent something")
	}
	ds, all, _ := e.ApplyAll(context.Background(), []engine.Request{{Limit: l, Key: "k", Cost: 1}, {Limit: l, Key: "k", Cost: 2}})
	if !all || ds[1].Remaining != 0 {
		t.Fatalf("1 then 2 against 3: all %v, remaining %d; want true, 0", all, ds[1].Remaining)
	}
	if d, _ := e.Apply(context.Background(), l, "k", 1); d.Allowed {
		t.Fatal("ApplyAll did not spend both")
	}
}

func TestInvalidCostIsAnErrorAndSpendsNothing(t *testing.T) {
	e := openEngine(t, backends[0].open, engine.NewFakeClock(t0))
	l := limit(algo.TokenBucketName, fivePerMinute, "x")
	for _, c := range []struct {
		cost int64
		want error
	}{{0, engine.ErrInvalidCost}, {-1, engine.ErrInvalidCost}, {6, engine.ErrCostExceedsCapacity}} {
		if _, err := e.Apply(context.Background(), l, "k", c.cost); !errors.Is(err, c.want) {
			t.Errorf("Apply(cost %d) error = %v, want %v", c.cost, err, c.want)
		}
		if _, _, err := e.ApplyAll(context.Background(), []engine.Request{{Limit: l, Key: "k", Cost: c.cost}}); !errors.Is(err, c.want) {
			t.Errorf("ApplyAll(cost %d) error = %v, want %v", c.cost, err, c.want)
		}
	}
	if d, _ := e.Apply(context.Background(), l, "k", 5); !d.Allowed {
		t.Fatal("an invalid cost spent something")
	}
	if _, err := e.Apply(context.Background(), engine.Limit{Namespace: "none"}, "k", 1); !errors.Is(err, engine.ErrNoAlgorithm) {
		t.Fatalf("Apply without algorithm: %v", err)
	}
}

func TestCloseTwiceAndCallsAfterClose(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			e, err := engine.New(bk.open(nil), nil)
			if err != nil {
				t.Fatal(err)
			}
			l := limit(algo.GCRAName, fivePerMinute, "x")
			e.Apply(context.Background(), l, "k", 1)
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			if err := e.Close(); err != nil {
				t.Fatalf("second Close = %v, want nil", err)
			}
			if _, err := e.Apply(context.Background(), l, "k", 1); !errors.Is(err, engine.ErrClosed) {
				t.Errorf("Apply after Close = %v, want ErrClosed", err)
			}
			if _, err := e.Peek(context.Background(), l, "k", 1); !errors.Is(err, engine.ErrClosed) {
				t.Errorf("Peek after Close = %v, want ErrClosed", err)
			}
			if err := e.Reset(context.Background(), l, "k"); !errors.Is(err, engine.ErrClosed) {
				t.Errorf("Reset after Close = %v, want ErrClosed", err)
			}
			if _, _, err := e.ApplyAll(context.Background(), []engine.Request{{Limit: l, Key: "k", Cost: 1}}); !errors.Is(err, engine.ErrClosed) {
				t.Errorf("ApplyAll after Close = %v, want ErrClosed", err)
			}
		})
	}
}

func TestCorruptRecordIsCountedAndTreatedAsFresh(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			clock := engine.NewFakeClock(t0)
			b := bk.open(clock)
			e := newEngine(t, b, clock)
			for i, name := range algo.Names {
				l := limit(name, algo.Params{Limit: 3, Window: time.Minute}, string(name))
				for _, junk := range [][]byte{{0xff}, {0x11, 1, 2}, make([]byte, 40)} {
					// The junk is written behind the engine's back. Over the
					// swap path the engine's last-seen record, spent, would
					// deny the request without reading the store; Reset
					// forgets it first.
					if err := e.Reset(context.Background(), l, "k"); err != nil {
						t.Fatal(err)
					}
					if err := b.Put(engine.AppendKey(nil, l.Namespace, "k"), junk, 0); err != nil {
						t.Fatal(err)
					}
					d, err := e.Apply(context.Background(), l, "k", 3)
					if err != nil || !d.Allowed || !d.CorruptState {
						t.Fatalf("%s over %x: %+v, %v; want a fresh, allowed decision flagged corrupt", name, junk, d, err)
					}
				}
				if got, want := e.Stats().CorruptRecords, uint64(3*(i+1)); got != want {
					t.Fatalf("CorruptRecords = %d, want %d", got, want)
				}
				if d, _ := e.Apply(context.Background(), l, "k", 1); d.Allowed || d.CorruptState {
					t.Fatalf("%s: the fresh record was not written back: %+v", name, d)
				}
			}
		})
	}
}

// TestCorruptRecordWarningNamesTheCaller: the warning a corrupt record
// logs names the rule's namespace and the caller's key, by Apply and by
// ApplyKeyInto alike (over memory the decision sees only the namespaced key).
func TestCorruptRecordWarningNamesTheCaller(t *testing.T) {
	for _, bk := range backends {
		for _, prepared := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/prepared=%v", bk.name, prepared), func(t *testing.T) {
				var logs bytes.Buffer
				clock := engine.NewFakeClock(t0)
				b := bk.open(clock)
				e, err := engine.New(b, &engine.Options{Clock: clock, Stripes: 16, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { e.Close() })
				l := limit(algo.GCRAName, algo.Params{Limit: 3, Window: time.Minute}, "orders-write")
				if err := b.Put(engine.AppendKey(nil, l.Namespace, "user-7"), []byte{0xff}, 0); err != nil {
					t.Fatal(err)
				}
				var d algo.Decision
				if prepared {
					k := l.Key("user-7")
					err = e.ApplyKeyInto(context.Background(), l, &k, 1, &d)
				} else {
					d, err = e.Apply(context.Background(), l, "user-7", 1)
				}
				if err != nil || !d.CorruptState {
					t.Fatalf("decision = %+v, %v; want one flagged corrupt", d, err)
				}
				for _, want := range []string{"namespace=orders-write", "key=user-7", "corrupt_total=1"} {
					if !strings.Contains(logs.String(), want) {
						t.Errorf("warning %q lacks %q", logs.String(), want)
					}
				}
			})
		}
	}
}

func TestStoreErrorIsReturnedAndTheNextCallWorks(t *testing.T) {
	b, f := faulty.Wrap(newMapBackend())
	e := newEngine(t, b, engine.NewFakeClock(t0))
	l := limit(algo.FixedWindowName, algo.Params{Limit: 2, Window: time.Minute}, "x")
	addRule(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpPut}, Times: 1, Err: faulty.ErrInjected})
	if _, err := e.Apply(context.Background(), l, "k", 1); !errors.Is(err, engine.ErrStore) || !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("Apply with failing Put = %v, want ErrStore wrapping the cause", err)
	}
	addRule(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpGet}, Times: 1, Err: faulty.ErrInjected})
	if _, err := e.Apply(context.Background(), l, "k", 1); !errors.Is(err, engine.ErrStore) {
		t.Fatalf("Apply with failing Get = %v, want ErrStore", err)
	}
	// Nothing was recorded by the failed calls: the whole limit is left.
	for i := range 2 {
		if d, err := e.Apply(context.Background(), l, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("request %d after the failures: %+v, %v", i, d, err)
		}
	}
	if d, _ := e.Apply(context.Background(), l, "k", 1); d.Allowed {
		t.Fatal("third request allowed")
	}
	if got := e.Stats().StoreErrors; got != 2 {
		t.Fatalf("StoreErrors = %d, want 2", got)
	}
}

// TestConcurrentCallersAdmitExactlyTheCapacity is DESIGN.md property 6: with a
// frozen clock nothing refills, so any admission above the capacity is a lost
// update.
func TestConcurrentCallersAdmitExactlyTheCapacity(t *testing.T) {
	for _, bk := range backends {
		for _, name := range algo.Names {
			t.Run(bk.name+"/"+string(name), func(t *testing.T) {
				t.Parallel()
				e := openEngine(t, bk.open, engine.NewFakeClock(t0))
				l := limit(name, algo.Params{Limit: 100, Window: time.Hour}, "hot")
				var admitted atomic.Int64
				var wg sync.WaitGroup
				for g := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 50 {
							d, err := e.Apply(context.Background(), l, "hot-tenant", 1)
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								admitted.Add(1)
							}
							// Other tenants on other keys at the same time.
							e.Apply(context.Background(), l, fmt.Sprintf("tenant-%d", g), 1)
						}
					}()
				}
				wg.Wait()
				if got := admitted.Load(); got != 100 {
					t.Fatalf("admitted %d of 400 against a capacity of 100", got)
				}
				for g := range 8 {
					if d, _ := e.Peek(context.Background(), l, fmt.Sprintf("tenant-%d", g), 1); d.Remaining != 49 {
						t.Fatalf("tenant-%d remaining %d, want 49: stripes leaked budget", g, d.Remaining)
					}
				}
			})
		}
	}
}

func TestSplitKeyInvertsAppendKey(t *testing.T) {
	for _, c := range [][2]string{{"", ""}, {"orders", "u-1"}, {"a|b", "c|d"}, {string(make([]byte, 300)), "k"}} {
		ns, key, ok := engine.SplitKey(engine.AppendKey(nil, c[0], c[1]))
		if !ok || ns != c[0] || key != c[1] {
			t.Errorf("SplitKey(AppendKey(%q, %q)) = %q, %q, %v", c[0], c[1], ns, key, ok)
		}
	}
	if _, _, ok := engine.SplitKey([]byte{0x05, 'a'}); ok {
		t.Error("SplitKey accepted a namespace longer than the key")
	}
}

func TestStripesMustBeAPowerOfTwo(t *testing.T) {
	if _, err := engine.New(newMapBackend(), &engine.Options{Stripes: 12}); err == nil {
		t.Fatal("12 stripes accepted")
	}
}

// TestInvalidCostOverACorruptRecord: a cost that can never be allowed is an
// error before anything is decided, also where the stored record is corrupt
// (which a decision would drop and count): the record stays, uncounted.
func TestInvalidCostOverACorruptRecord(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			clock := engine.NewFakeClock(t0)
			b := bk.open(clock)
			e := newEngine(t, b, clock)
			l := limit(algo.TokenBucketName, fivePerMinute, "x")
			k := engine.AppendKey(nil, l.Namespace, "k")
			if err := b.Put(k, []byte{0xff}, 0); err != nil {
				t.Fatal(err)
			}
			for _, cost := range []int64{6, 0} {
				d, err := e.Apply(context.Background(), l, "k", cost)
				if !errors.Is(err, engine.ErrCostExceedsCapacity) && !errors.Is(err, engine.ErrInvalidCost) || d != (algo.Decision{}) {
					t.Fatalf("Apply(cost %d) over a corrupt record = %+v, %v; want a zero decision and a cost error", cost, d, err)
				}
			}
			if got, err := b.Get(k, clock.Now()); err != nil || !bytes.Equal(got, []byte{0xff}) {
				t.Fatalf("the corrupt record is now %x, %v; want it untouched", got, err)
			}
			if n := e.Stats().CorruptRecords; n != 0 {
				t.Fatalf("CorruptRecords = %d after refused costs, want 0", n)
			}
		})
	}
}
