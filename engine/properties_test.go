package engine_test

import (
	"context"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// genLimits draws one limit per algorithm with random parameters.
func genLimits(t *rapid.T) []engine.Limit {
	var out []engine.Limit
	for _, name := range algo.Names {
		p := algo.Params{
			Limit:  rapid.Int64Range(1, 20).Draw(t, string(name)+".limit"),
			Window: time.Duration(rapid.SampledFrom([]int64{1e6, 7e8, 1e9, 7e9, 60e9}).Draw(t, string(name)+".window")),
		}
		if name == algo.TokenBucketName || name == algo.LeakyBucketName || name == algo.GCRAName {
			p.Burst = rapid.Int64Range(0, 30).Draw(t, string(name)+".burst")
		}
		out = append(out, engine.Limit{Namespace: string(name), Algorithm: algo.MustNew(name, p)})
	}
	return out
}

// genStep draws how far the clock moves before a request: mostly forwards,
// by nothing, a little, exactly a window, or a lot; sometimes backwards.
func genStep(t *rapid.T) time.Duration {
	return time.Duration(rapid.OneOf(
		rapid.Just(int64(0)),
		rapid.Int64Range(1, 1e6),
		rapid.Int64Range(1, 3e9),
		rapid.SampledFrom([]int64{1e6, 7e8, 1e9, 7e9, 60e9, 120e9}),
		rapid.Int64Range(-2e9, -1),
	).Draw(t, "step"))
}

var propKeys = []string{"a", "b", "c"}

// model is the plain-map reference: the algorithms stepped directly, with
// records forgotten at their expiry.
type model struct {
	recs map[string]modelRecord
}

type modelRecord struct {
	value     []byte
	expiresAt int64
}

// expire forgets every record expired at now, as a full sweep does.
func (m *model) expire(now int64) {
	for k, r := range m.recs {
		if r.expiresAt <= now {
			delete(m.recs, k)
		}
	}
}

func (m *model) apply(l engine.Limit, key string, now, cost int64) algo.Decision {
	k := string(engine.AppendKey(nil, l.Namespace, key))
	var state []byte
	if r, ok := m.recs[k]; ok && r.expiresAt > now {
		state = append([]byte(nil), r.value...)
	}
	next, d := l.Algorithm.Step(state, now, cost)
	if next != nil {
		if d.TTL > 0 {
			m.recs[k] = modelRecord{append([]byte(nil), next...), now + int64(d.TTL)}
		} else {
			delete(m.recs, k)
		}
	}
	return d
}

// TestModelEquivalence is DESIGN.md property 5: the engine over each backend
// answers exactly what the map model answers, for random interleavings of
// keys, costs, clock steps (backwards too), resets and sweeps.
func TestModelEquivalence(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				limits := genLimits(t)
				clock := engine.NewFakeClock(t0)
				b := bk.open(clock)
				e, err := engine.New(b, &engine.Options{Clock: clock, Stripes: 4})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				m := &model{recs: map[string]modelRecord{}}
				for i := range rapid.IntRange(1, 200).Draw(t, "ops") {
					switch rapid.IntRange(0, 9).Draw(t, "op") {
					case 0:
						clock.Advance(genStep(t))
					case 1:
						// A full sweep: the model forgets what it removes, so
						// that a clock stepping back afterwards does not
						// resurrect a record in one and not the other.
						if _, ok := b.(backend.Sweeper); ok {
							if _, err := e.Sweep(1 << 30); err != nil {
								t.Fatal(err)
							}
							m.expire(clock.Now())
						}
					case 2:
						l := rapid.SampledFrom(limits).Draw(t, "limit")
						key := rapid.SampledFrom(propKeys).Draw(t, "key")
						if err := e.Reset(context.Background(), l, key); err != nil {
							t.Fatal(err)
						}
						delete(m.recs, string(engine.AppendKey(nil, l.Namespace, key)))
					default:
						l := rapid.SampledFrom(limits).Draw(t, "limit")
						key := rapid.SampledFrom(propKeys).Draw(t, "key")
						cost := rapid.Int64Range(1, l.Algorithm.Params().Capacity()).Draw(t, "cost")
						got, err := e.Apply(context.Background(), l, key, cost)
						if err != nil {
							t.Fatalf("op %d: %v", i, err)
						}
						if want := m.apply(l, key, clock.Now(), cost); got != want {
							t.Fatalf("op %d: %s %q cost %d at %d:\n got %+v\nwant %+v", i, l.Namespace, key, cost, clock.Now(), got, want)
						}
					}
				}
			})
		})
	}
}

// TestEvictionIsInvisible is DESIGN.md property 4: the same trace through a
// store that forgets every record the moment its TTL passes, and through one
// that never forgets anything, gives the same decisions.
func TestEvictionIsInvisible(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limits := genLimits(t)
		clock := engine.NewFakeClock(t0)
		forgetting := memory.New(&memory.Options{SweepInterval: -1, Shards: 4})
		keeping := newMapBackend()
		keeping.keepExpired = true
		ef, _ := engine.New(forgetting, &engine.Options{Clock: clock})
		ek, _ := engine.New(keeping, &engine.Options{Clock: clock})
		defer ef.Close()
		defer ek.Close()
		for i := range rapid.IntRange(1, 200).Draw(t, "ops") {
			if rapid.IntRange(0, 3).Draw(t, "advance") == 0 {
				step := genStep(t)
				if step < 0 {
					step = -step // eviction is only promised for a clock that moves forwards
				}
				clock.Advance(step)
				if _, err := forgetting.Sweep(clock.Now(), 1<<20); err != nil {
					t.Fatal(err)
				}
			}
			l := rapid.SampledFrom(limits).Draw(t, "limit")
			key := rapid.SampledFrom(propKeys).Draw(t, "key")
			cost := rapid.Int64Range(1, l.Algorithm.Params().Capacity()).Draw(t, "cost")
			df, err1 := ef.Apply(context.Background(), l, key, cost)
			dk, err2 := ek.Apply(context.Background(), l, key, cost)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if df != dk {
				t.Fatalf("op %d: %s %q cost %d:\nevicting %+v\nkeeping  %+v", i, l.Namespace, key, cost, df, dk)
			}
		}
	})
}

func (m *model) clone() *model {
	c := &model{recs: make(map[string]modelRecord, len(m.recs))}
	for k, r := range m.recs {
		c.recs[k] = r
	}
	return c
}
