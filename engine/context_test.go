package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/engine"
)

// ctxStores are the stores of backends and durables, with whether the
// engine reads a call's context over each: every path but a
// backend.Striped store's.
func ctxStores(t *testing.T) []struct {
	name  string
	open  func(engine.Clock) backend.Backend
	reads bool
} {
	type s = struct {
		name  string
		open  func(engine.Clock) backend.Backend
		reads bool
	}
	var out []s
	for _, b := range backends {
		out = append(out, s{b.name, b.open, b.name == "plain" || b.name == "swap"})
	}
	for _, d := range durables {
		out = append(out, s{d.name, func(engine.Clock) backend.Backend { return d.open(t, t.TempDir()) }, true})
	}
	return out
}

// A call whose context is done returns an error wrapping the context's
// error and spends nothing, over every store that reads it; over a
// Striped store (memory) the context is never read and the call decides
// as any other. Neither is a store error.
func TestContextDoneSpendsNothing(t *testing.T) {
	l := limit(algo.TokenBucketName, algo.Params{Limit: 10, Window: time.Minute}, "ctx")
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, stop := context.WithDeadline(t.Context(), t0.Add(-time.Hour))
	defer stop()
	for _, st := range ctxStores(t) {
		for _, c := range []struct {
			name string
			ctx  context.Context
			want error
		}{{"cancelled", cancelled, context.Canceled}, {"expired", expired, context.DeadlineExceeded}} {
			t.Run(st.name+"/"+c.name, func(t *testing.T) {
				clock := engine.NewFakeClock(t0)
				e := openEngine(t, st.open, clock)
				bg := t.Context()
				if d, err := e.Apply(bg, l, "a", 1); err != nil || !d.Allowed {
					t.Fatalf("Apply(background) = %+v, %v; want allowed", d, err)
				}
				k := l.Key("a")
				var kd algo.Decision
				calls := []struct {
					name string
					call func() error
				}{
					{"Apply", func() error { _, err := e.Apply(c.ctx, l, "a", 1); return err }},
					{"ApplyKeyInto", func() error { return e.ApplyKeyInto(c.ctx, l, &k, 1, &kd) }},
					{"ApplyAll", func() error {
						_, _, err := e.ApplyAll(c.ctx, []engine.Request{{Limit: l, Key: "a", Cost: 1}, {Limit: l, Key: "b", Cost: 1}})
						return err
					}},
					{"Peek", func() error { _, err := e.Peek(c.ctx, l, "a", 1); return err }},
					{"Record", func() error { _, err := e.Record(c.ctx, l, "a"); return err }},
					{"Flush", func() error { return e.Flush(c.ctx) }},
					{"Reset", func() error { return e.Reset(c.ctx, l, "a") }},
				}
				spent := int64(1)
				for _, call := range calls {
					err := call.call()
					reads := st.reads && (call.name != "Flush" || isDurable(e.Backend()))
					switch {
					case reads && !errors.Is(err, c.want):
						t.Fatalf("%s: err = %v, want one wrapping %v", call.name, err, c.want)
					case reads && errors.Is(err, engine.ErrStore):
						t.Fatalf("%s: err = %v, a store error", call.name, err)
					case !reads && err != nil:
						t.Fatalf("%s: err = %v over a store that never reads the context", call.name, err)
					case !reads && (call.name == "Apply" || call.name == "ApplyKeyInto" || call.name == "ApplyAll"):
						spent++
					case !reads && call.name == "Reset":
						spent = 0
					}
				}
				d, err := e.Peek(bg, l, "a", 1)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := d.Remaining, 10-spent-1; got != want {
					t.Errorf("after the calls: Peek.Remaining = %d, want %d (%d spent)", got, want, spent)
				}
				if n := e.Stats().StoreErrors; n != 0 {
					t.Errorf("Stats.StoreErrors = %d, want 0", n)
				}
			})
		}
	}
}

func isDurable(b backend.Backend) bool {
	_, ok := b.(backend.Durable)
	return ok
}
