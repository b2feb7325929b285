package engine_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
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

// Over the compare-and-swap path, a caller queued behind a key's leader
// (whose compare-and-swap the store holds) leaves the queue once its
// context is cancelled, at once, with an error wrapping context.Canceled,
// and nothing is spent for it; the leader's decision is committed when the
// store answers. A leader whose own context ends while its
// compare-and-swap waits in the store (SwapOptions.Delay) returns then,
// and the store writes nothing. Neither is a store error.
func TestSwapContextEndsTheWait(t *testing.T) {
	clock := engine.NewFakeClock(t0)
	hold := make(chan struct{})
	var holding atomic.Bool
	held := make(chan struct{})
	store := backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now, Before: func(*backendtest.SwapStore, []backend.Swap) {
		if holding.CompareAndSwap(true, false) {
			close(held)
			<-hold
		}
	}})
	e := newSwapEngine(t, store, clock, nil)
	l := limit(algo.TokenBucketName, algo.Params{Limit: 10, Window: time.Hour}, "x")
	if _, err := e.Apply(t.Context(), l, "warm-up", 1); err != nil { // learns the store's clock
		t.Fatal(err)
	}
	holding.Store(true)
	leader := make(chan error, 1)
	go func() {
		_, err := e.Apply(t.Context(), l, "hot", 1)
		leader <- err
	}()
	<-held // the leader's compare-and-swap is in the store
	ctx, cancel := context.WithCancel(t.Context())
	queued := make(chan error, 1)
	go func() {
		_, err := e.Apply(ctx, l, "hot", 3)
		queued <- err
	}()
	for engine.Queued(e, l, "hot") < 1 {
		runtime.Gosched()
	}
	cancel()
	if err := <-queued; !errors.Is(err, context.Canceled) || errors.Is(err, engine.ErrStore) {
		t.Fatalf("the queued caller, cancelled: %v; want an error wrapping context.Canceled, not ErrStore", err)
	}
	if n := engine.Queued(e, l, "hot"); n != 0 {
		t.Fatalf("%d callers queued after the cancelled one left, want 0", n)
	}
	close(hold)
	if err := <-leader; err != nil {
		t.Fatalf("the leader: %v", err)
	}
	if d, err := e.Peek(t.Context(), l, "hot", 1); err != nil || d.Remaining != 8 {
		t.Fatalf("Peek after = %+v, %v; want 8 remaining: the leader's 1 spent, the cancelled caller's 3 not", d, err)
	}

	slow := backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now, Delay: time.Hour})
	es := newSwapEngine(t, slow, clock, nil)
	ctx, cancel = context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := es.Apply(ctx, l, "k", 1)
		done <- err
	}()
	for slow.Calls() == 0 {
		runtime.Gosched()
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || errors.Is(err, engine.ErrStore) {
		t.Fatalf("a leader cancelled in the store's delay: %v; want an error wrapping context.Canceled, not ErrStore", err)
	}
	if n := slow.Len(); n != 0 {
		t.Fatalf("the store holds %d records after the cancelled call, want 0", n)
	}
	for _, x := range []*engine.Engine{e, es} {
		if n := x.Stats().StoreErrors; n != 0 {
			t.Errorf("Stats.StoreErrors = %d, want 0", n)
		}
	}
}
