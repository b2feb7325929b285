package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/engine"
)

// TestContextBoundsTheCall: over a real redis-server, with a store deadline
// far longer than the test needs (5s), a decision whose context is already
// cancelled returns at once with an error wrapping context.Canceled and
// spends nothing; on a server that stopped answering (SIGSTOP), a caller's
// deadline of 100ms, and a cancellation 100ms in, each end the call then,
// not at the store's deadline, with an error wrapping the context's. None
// is a store error: the engine counts none, and neither does the breaker,
// which stays closed.
func TestContextBoundsTheCall(t *testing.T) {
	srv := redistest.Start(t)
	const storeTimeout = 5 * time.Second
	s := open(t, []string{srv.Addr}, redis.Options{Timeout: storeTimeout})
	e := newEngine(t, s, engine.Options{})
	l := engine.Limit{Namespace: "ctx", Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 10, Window: time.Hour})}
	bg := t.Context()
	if d, err := e.Apply(bg, l, "k", 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}

	cancelled, cancel := context.WithCancel(bg)
	cancel()
	start := time.Now()
	_, err := e.Apply(cancelled, l, "k", 1)
	if took := time.Since(start); took > ceiling || !errors.Is(err, context.Canceled) || errors.Is(err, engine.ErrStore) {
		t.Fatalf("cancelled: %v after %v, want at once an error wrapping context.Canceled, not ErrStore", err, took)
	}
	if d, err := e.Peek(bg, l, "k", 1); err != nil || d.Remaining != 8 {
		t.Fatalf("after the cancelled call: Peek = %+v, %v; want 8 remaining (only the first request spent)", d, err)
	}

	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) { return context.WithTimeout(bg, 100*time.Millisecond) }, context.DeadlineExceeded},
		{"cancelled while waiting", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(bg)
			time.AfterFunc(100*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	} {
		ctx, cancel := c.ctx()
		start := time.Now()
		_, err := e.Apply(ctx, l, "k", 1)
		took := time.Since(start)
		cancel()
		if took >= storeTimeout || !errors.Is(err, c.want) || errors.Is(err, engine.ErrStore) {
			t.Fatalf("%s, server stopped: %v after %v; want an error wrapping %v before the store's %v deadline, not ErrStore",
				c.name, err, took, c.want, storeTimeout)
		}
		t.Logf("%s, server stopped: returned after %v: %v", c.name, took, err)
	}
	srv.Resume()
	resumed = true
	if n := e.Stats().StoreErrors; n != 0 {
		t.Errorf("Stats.StoreErrors = %d, want 0: the callers gave up, not the store", n)
	}
	if b := s.Breaker(); b.Open || b.Failures != 0 {
		t.Errorf("breaker %+v, want closed with no failure counted", b)
	}
	if d, err := e.Apply(bg, l, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("after the server came back: %+v, %v", d, err)
	}
}
