package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// TestPathsAgree: the same random trace (applies, peeks, ApplyAll, resets,
// sweeps, clock steps backwards too) through every path the engine can take
// gives identical decisions and leaves identical records: the memory
// store's devirtualised fast path, the same store behind faulty's wrapper
// (the Striped path through an interface), a plain map under the engine's
// locks, and the compare-and-swap path over the in-process Swapper. The
// records are compared after every operation, read through each store at
// the clock's now.
func TestPathsAgree(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { pathsAgree(t, genLimits(t), backends) })
}

// TestPathsAgreeWhenRulesChange is TestPathsAgree with two rules per
// namespace, as a reload that changes a limit makes them: a record spent
// under one rate is stepped under another, and a denial keeps it as long as
// its caller waits. Every path that can lengthen an expiry
// (backend.Striped.ExtendLocked, or the swap's Keep) agrees; the plain map
// under the engine's locks cannot, and is left out.
func TestPathsAgreeWhenRulesChange(t *testing.T) {
	var bks []store
	for _, b := range backends {
		if b.name != "plain" {
			bks = append(bks, b)
		}
	}
	rapid.Check(t, func(t *rapid.T) { pathsAgree(t, genChangingLimits(t), bks) })
}

// genChangingLimits draws two rules per algorithm in the algorithm's
// namespace.
func genChangingLimits(t *rapid.T) []engine.Limit {
	var out []engine.Limit
	for range 2 {
		out = append(out, genLimits(t)...)
	}
	return out
}

// pathsAgree runs one random trace over limits through an engine over each
// of bks, failing at the first answer or record that differs.
func pathsAgree(t *rapid.T, limits []engine.Limit, bks []store) {
	clock := engine.NewFakeClock(t0)
	engines := make([]*engine.Engine, len(bks))
	for i, bk := range bks {
		e, err := engine.New(bk.open(clock), &engine.Options{Clock: clock, Stripes: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		engines[i] = e
	}
	for i, e := range engines {
		if _, ok := e.Backend().(backend.Sweeper); !ok {
			t.Fatalf("%s does not sweep: a record it keeps could come back when the clock steps back", bks[i].name)
		}
	}
	for i := range rapid.IntRange(1, 150).Draw(t, "ops") {
		l := rapid.SampledFrom(limits).Draw(t, "limit")
		key := rapid.SampledFrom(propKeys).Draw(t, "key")
		cost := rapid.Int64Range(1, l.Algorithm.Params().Capacity()).Draw(t, "cost")
		op := rapid.IntRange(0, 9).Draw(t, "op")
		l2 := rapid.SampledFrom(limits).Draw(t, "limit2")
		key2 := rapid.SampledFrom(propKeys).Draw(t, "key2")
		var answers []string
		for _, e := range engines {
			var got string
			switch op {
			case 0:
				got = "advance"
			case 1:
				n, err := e.Sweep(1 << 20)
				got = fmt.Sprint("swept ", n, err)
			case 2:
				got = fmt.Sprint(e.Reset(context.Background(), l, key))
			case 3:
				d, err := e.Peek(context.Background(), l, key, cost)
				got = fmt.Sprintf("%+v %v", d, err)
			case 4:
				ds, all, err := e.ApplyAll(context.Background(), []engine.Request{{Limit: l, Key: key, Cost: cost}, {Limit: l2, Key: key2, Cost: 1}})
				got = fmt.Sprintf("%+v %v %v", ds, all, err)
			default:
				d, err := e.Apply(context.Background(), l, key, cost)
				got = fmt.Sprintf("%+v %v", d, err)
			}
			answers = append(answers, got)
		}
		if op == 0 {
			clock.Advance(genStep(t))
		}
		for j := 1; j < len(engines); j++ {
			if answers[j] != answers[0] {
				t.Fatalf("op %d (%d): %s answered\n %s\n%s answered\n %s", i, op, bks[0].name, answers[0], bks[j].name, answers[j])
			}
		}
		for _, l := range limits {
			for _, key := range propKeys {
				k := engine.AppendKey(nil, l.Namespace, key)
				want, err := engines[0].Backend().Get(k, clock.Now())
				if err != nil {
					t.Fatal(err)
				}
				for j := 1; j < len(engines); j++ {
					got, err := engines[j].Backend().Get(k, clock.Now())
					if err != nil || !bytes.Equal(got, want) {
						t.Fatalf("op %d: record %s/%s: %s holds %x (%v), %s holds %x", i, l.Namespace, key, bks[j].name, got, err, bks[0].name, want)
					}
				}
			}
		}
	}
}

// TestApplyAllIsAllOrNothing: random ApplyAll calls of one to three requests
// (a key may repeat), between single applies and clock steps, over every
// path, answer what the map model answers when it steps every request and
// keeps the new records only if all of them were allowed.
func TestApplyAllIsAllOrNothing(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				limits := genLimits(t)
				clock := engine.NewFakeClock(t0)
				e, err := engine.New(bk.open(clock), &engine.Options{Clock: clock, Stripes: 4})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				m := &model{recs: map[string]modelRecord{}}
				for i := range rapid.IntRange(1, 100).Draw(t, "ops") {
					switch rapid.IntRange(0, 3).Draw(t, "op") {
					case 0:
						clock.Advance(genStep(t))
					case 1:
						l := rapid.SampledFrom(limits).Draw(t, "limit")
						key := rapid.SampledFrom(propKeys).Draw(t, "key")
						got, err := e.Apply(context.Background(), l, key, 1)
						if want := m.apply(l, key, clock.Now(), 1); err != nil || got != want {
							t.Fatalf("op %d: Apply = %+v, %v; want %+v", i, got, err, want)
						}
					default:
						reqs := make([]engine.Request, rapid.IntRange(1, 3).Draw(t, "requests"))
						for j := range reqs {
							l := rapid.SampledFrom(limits).Draw(t, "limit")
							reqs[j] = engine.Request{Limit: l, Key: rapid.SampledFrom(propKeys).Draw(t, "key"),
								Cost: rapid.Int64Range(1, l.Algorithm.Params().Capacity()).Draw(t, "cost")}
						}
						got, all, err := e.ApplyAll(context.Background(), reqs)
						if err != nil {
							t.Fatalf("op %d: %v", i, err)
						}
						saved := m.clone()
						wantAll := true
						for j, r := range reqs {
							want := m.apply(r.Limit, r.Key, clock.Now(), r.Cost)
							wantAll = wantAll && want.Allowed
							if got[j] != want {
								t.Fatalf("op %d, request %d: %+v, want %+v", i, j, got[j], want)
							}
						}
						if all != wantAll {
							t.Fatalf("op %d: all = %v, want %v", i, all, wantAll)
						}
						if !all {
							m = saved
						}
					}
				}
			})
		})
	}
}

// TestFaultyMemoryTakesTheStripedPath: over faulty's wrapper the memory store
// is reached through backend.Striped's locked calls, the path of the bare
// store, so a fault on GetLocked reaches a decision; and Stats and Sweep
// reach the store through the backend.Striped the wrapper is.
func TestFaultyMemoryTakesTheStripedPath(t *testing.T) {
	clock := engine.NewFakeClock(t0)
	b, f := faulty.Wrap(memory.New(&memory.Options{SweepInterval: -1, Now: clock.Now}))
	e := newEngine(t, b, clock)
	l := limit(algo.TokenBucketName, algo.Params{Limit: 2, Window: time.Second}, "x")
	addRule(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpGetLocked}, Times: 1, Err: faulty.ErrInjected})
	if _, err := e.Apply(context.Background(), l, "k", 1); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("Apply with GetLocked failing = %v, want the injected error", err)
	}
	for _, key := range []string{"a", "b", "c"} {
		if _, err := e.Apply(context.Background(), l, key, 1); err != nil {
			t.Fatal(err)
		}
	}
	if f.Calls(faulty.OpGet) != 0 || f.Calls(faulty.OpPut) != 0 {
		t.Fatalf("the engine called Get %d and Put %d times: not the striped path", f.Calls(faulty.OpGet), f.Calls(faulty.OpPut))
	}
	if s := e.Stats(); s.Keys != 3 || s.Evictions != 0 {
		t.Fatalf("Stats = %+v, want 3 keys, no evictions", s)
	}
	clock.Advance(time.Hour)
	if n, err := e.Sweep(0); err != nil || n != 3 {
		t.Fatalf("Sweep = %d, %v; want the 3 expired keys", n, err)
	}
	if s := e.Stats(); s.Keys != 0 || s.Evictions != 3 {
		t.Fatalf("Stats after Sweep = %+v, want 0 keys, 3 evictions", s)
	}
	if f.Calls(faulty.OpSweep) != 1 {
		t.Fatalf("%d Sweep calls through the wrapper, want 1", f.Calls(faulty.OpSweep))
	}
}

// TestSweepOverEveryStore: Engine.Sweep removes expired records from every
// store that implements backend.Sweeper, whatever the path.
func TestSweepOverEveryStore(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			clock := engine.NewFakeClock(t0)
			e := openEngine(t, bk.open, clock)
			l := limit(algo.FixedWindowName, algo.Params{Limit: 2, Window: time.Second}, "x")
			for _, key := range []string{"a", "b"} {
				if _, err := e.Apply(context.Background(), l, key, 1); err != nil {
					t.Fatal(err)
				}
			}
			if got := e.Len(); got != 2 {
				t.Fatalf("Len = %d, want 2", got)
			}
			if n, err := e.Sweep(0); err != nil || n != 0 {
				t.Fatalf("Sweep before expiry = %d, %v; want 0", n, err)
			}
			clock.Advance(time.Second)
			if n, err := e.Sweep(0); err != nil || n != 2 {
				t.Fatalf("Sweep after expiry = %d, %v; want 2", n, err)
			}
			if got := e.Len(); got != 0 {
				t.Fatalf("Len after Sweep = %d, want 0", got)
			}
		})
	}
}

// twoPaths is a memory store that also claims the compare-and-swap path.
type twoPaths struct {
	*memory.Store
	swap *backendtest.SwapStore
}

func (p twoPaths) CompareAndSwap(ctx context.Context, s []backend.Swap) (bool, [][]byte, int64, error) {
	return p.swap.CompareAndSwap(ctx, s)
}
func (p twoPaths) TTLUnit() time.Duration                             { return p.swap.TTLUnit() }
func (p twoPaths) SwapGroup(k []byte) string                          { return p.swap.SwapGroup(k) }
func (p twoPaths) WatchDeletes(fn func([]byte)) (func(), error)       { return p.swap.WatchDeletes(fn) }
func (p twoPaths) Range(s []byte, fn func(backend.Record) bool) error { return p.swap.Range(s, fn) }

// TestNewRefusesTwoPaths: a store implementing two of the path interfaces
// is refused, naming both: which one it means cannot be told.
func TestNewRefusesTwoPaths(t *testing.T) {
	b := twoPaths{memory.New(&memory.Options{SweepInterval: -1}), backendtest.NewSwapStore(nil)}
	defer b.Close()
	_, err := engine.New(b, nil)
	if err == nil || !strings.Contains(err.Error(), "backend.Striped and backend.Swapper") || !strings.HasPrefix(err.Error(), "sluice/engine: ") {
		t.Fatalf("New over a Striped Swapper = %v, want an error naming both paths", err)
	}
}
