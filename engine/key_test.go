package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// TestApplyKeyIsApply: over every kind of store, an engine deciding prepared
// keys with ApplyKeyInto (into a zero Decision or over a leftover one)
// answers exactly as a twin deciding the same requests with Apply, for
// every algorithm, random costs (invalid ones too) and clock
// steps, keys prepared under the right namespace, under another one, and
// the zero Key.
func TestApplyKeyIsApply(t *testing.T) {
	stores := []struct {
		name string
		open func() backend.Backend
	}{
		{"memory", func() backend.Backend { return memory.New(&memory.Options{SweepInterval: -1, Shards: 4}) }},
		{"plain", func() backend.Backend { return newMapBackend() }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				limits := genLimits(t)
				clock := engine.NewFakeClock(t0)
				ek, err := engine.New(st.open(), &engine.Options{Clock: clock})
				if err != nil {
					t.Fatal(err)
				}
				defer ek.Close()
				ea, err := engine.New(st.open(), &engine.Options{Clock: clock})
				if err != nil {
					t.Fatal(err)
				}
				defer ea.Close()
				for i := range rapid.IntRange(1, 60).Draw(t, "requests") {
					l := rapid.SampledFrom(limits).Draw(t, "limit")
					key := rapid.SampledFrom(propKeys).Draw(t, "key")
					var k engine.Key
					switch rapid.IntRange(0, 4).Draw(t, "prepared") {
					case 0:
						k = rapid.SampledFrom(limits).Draw(t, "other limit").Key(key)
					case 1:
						key = "" // the zero Key's
					default:
						k = l.Key(key)
					}
					clock.Advance(genStep(t))
					cost := rapid.Int64Range(-1, l.Algorithm.Params().Capacity()+1).Draw(t, "cost")
					var got algo.Decision
					var gerr error
					into := rapid.Bool().Draw(t, "into")
					if into {
						// A decision left over in *d: every field must be
						// written, or zeroed on an error.
						got = algo.Decision{Allowed: true, Limit: 77, Remaining: 76, RetryAfter: 5, Reset: 6, Delay: 7, TTL: 8, CorruptState: true}
					}
					gerr = ek.ApplyKeyInto(context.Background(), l, &k, cost, &got)
					want, werr := ea.Apply(context.Background(), l, key, cost)
					if got != want || !errors.Is(gerr, werr) && (gerr == nil || werr == nil || gerr.Error() != werr.Error()) {
						t.Fatalf("request %d, %s %q cost %d: ApplyKeyInto (over a leftover decision %v) = %+v, %v; Apply = %+v, %v", i, l.Namespace, key, cost, into, got, gerr, want, werr)
					}
				}
			})
		})
	}
}

// TestApplyKeyDoesNotAllocate: a prepared key's decision over the memory
// backend allocates nothing, allowed or denied.
func TestApplyKeyDoesNotAllocate(t *testing.T) {
	clock := engine.NewFakeClock(time.Unix(1_700_000_000, 0))
	e := benchEngine(t, clock)
	for _, p := range []algo.Params{unlimited, exhausted} {
		l := engine.Limit{Namespace: "bench", Algorithm: algo.MustNew(algo.GCRAName, p)}
		k := l.Key("user-0000000000000001")
		var d algo.Decision
		e.ApplyKeyInto(context.Background(), l, &k, 1, &d)
		if allocs := testing.AllocsPerRun(200, func() { e.ApplyKeyInto(context.Background(), l, &k, 1, &d) }); allocs != 0 {
			t.Errorf("%+v: %.1f allocations per ApplyKeyInto, want 0", p, allocs)
		}
	}
	if got := (engine.Limit{Namespace: "n"}).Key("caller").String(); got != "caller" {
		t.Errorf("Key.String() = %q, want the caller's key", got)
	}
}
