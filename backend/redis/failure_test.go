package redis_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/engine"
)

// ceiling is how long a call may take past its deadline before a test
// calls it hung: the scheduling of a loaded machine, not a figure of the
// store's.
const ceiling = 3 * time.Second

// decideWithin applies one request and fails the test if the call takes
// longer than timeout plus the ceiling.
func decideWithin(t *testing.T, e *engine.Engine, l engine.Limit, key string, timeout time.Duration) (algo.Decision, error) {
	t.Helper()
	start := time.Now()
	d, err := e.Apply(l, key, 1)
	if took := time.Since(start); took > timeout+ceiling {
		t.Fatalf("a decision took %v with a %v deadline", took, timeout)
	}
	return d, err
}

var failLimit = engine.Limit{Namespace: "f", Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 1000, Window: time.Second})}

// TestHungServerKeepsTheDeadline: a redis-server that stops answering
// (SIGSTOP: connections stay open, nothing replies) fails each decision at
// its deadline with an ErrStore wrapping context.DeadlineExceeded; after
// BreakerFailures of them the breaker opens and decisions fail at once
// with ErrUnavailable, without calling Redis; once the server answers
// again, the breaker's probe closes it and decisions work.
func TestHungServerKeepsTheDeadline(t *testing.T) {
	srv := redistest.Start(t)
	timeout := 50 * time.Millisecond
	cooldown := 200 * time.Millisecond
	s := open(t, []string{srv.Addr}, redis.Options{Timeout: timeout, BreakerFailures: 3, BreakerCooldown: cooldown})
	e := newEngine(t, s, engine.Options{})
	if d, err := e.Apply(failLimit, "k", 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	srv.Pause()
	for i := range 3 {
		_, err := decideWithin(t, e, failLimit, "k", timeout)
		if !errors.Is(err, engine.ErrStore) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d to a hung server: %v, want ErrStore wrapping DeadlineExceeded", i+1, err)
		}
	}
	_, err := decideWithin(t, e, failLimit, "k", 0)
	if !errors.Is(err, engine.ErrStore) || !errors.Is(err, redis.ErrUnavailable) {
		t.Fatalf("after 3 failures: %v, want ErrStore wrapping ErrUnavailable", err)
	}
	srv.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := decideWithin(t, e, failLimit, "k", timeout)
		if err == nil && d.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the server came back: %v", err)
		}
		time.Sleep(cooldown / 4)
	}
}

// TestSlowServerKeepsTheDeadline: while the server holds every command
// (CLIENT PAUSE, as a server busy with a slow script or a fork would), a
// decision fails at its deadline; once the pause ends, the next decision
// works.
func TestSlowServerKeepsTheDeadline(t *testing.T) {
	srv := redistest.Start(t)
	timeout := 50 * time.Millisecond
	e := newEngine(t, open(t, []string{srv.Addr}, redis.Options{Timeout: timeout, BreakerFailures: -1}), engine.Options{})
	if _, err := e.Apply(failLimit, "k", 1); err != nil {
		t.Fatal(err)
	}
	pause := 1500 * time.Millisecond
	srv.Do(t, "CLIENT", "PAUSE", strconv.FormatInt(pause.Milliseconds(), 10), "ALL")
	paused := time.Now()
	_, err := decideWithin(t, e, failLimit, "k", timeout)
	if time.Since(paused) < pause && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a decision while the server is paused: %v, want DeadlineExceeded", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := e.Apply(failLimit, "k", 1)
		if err == nil && d.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the pause: %+v, %v", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRestartedServer: a server killed and started again (its script cache
// and records gone) serves decisions again: the script is sent again by
// EVAL after NOSCRIPT, and the engine, whose last-seen record no longer
// matches, learns the empty key from the mismatch.
func TestRestartedServer(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, open(t, []string{srv.Addr}, redis.Options{Timeout: 100 * time.Millisecond, BreakerCooldown: 50 * time.Millisecond}), engine.Options{})
	l := engine.Limit{Namespace: "r", Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 3, Window: time.Hour})}
	for range 2 {
		e.Apply(l, "k", 1)
	}
	srv.Crash()
	if _, err := decideWithin(t, e, l, "k", 100*time.Millisecond); !errors.Is(err, engine.ErrStore) {
		t.Fatalf("with the server down: %v, want ErrStore", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := e.Apply(l, "k", 1)
		if err == nil {
			// The restarted server lost the spent record (no persistence):
			// the key starts fresh.
			if !d.Allowed || d.Remaining != 2 {
				t.Fatalf("first decision after the restart: %+v", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if calls := srv.CommandCalls(t); calls["eval"] == 0 {
		t.Fatalf("no EVAL after the restart (commandstats %v): the NOSCRIPT fallback did not run", calls)
	}
}

// TestOpenFailsClearly: a store on an address where nothing listens fails
// to open, within its connect timeout, saying Redis does not answer.
func TestOpenFailsClearly(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr
	srv.Kill()
	start := time.Now()
	_, err := redis.Open(redis.ClientOptions{Addrs: []string{addr}}, &redis.Options{ConnectTimeout: 200 * time.Millisecond})
	if err == nil {
		t.Fatal("Open on a dead address succeeded")
	}
	if took := time.Since(start); took > 200*time.Millisecond+ceiling {
		t.Fatalf("Open took %v with a 200ms connect timeout", took)
	}
	t.Log(err)
}

// TestSentinel: with MasterName, the store finds its primary through a
// Sentinel and decides on it.
func TestSentinel(t *testing.T) {
	primary := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, primary, "sluice-primary")
	s, err := redis.Open(redis.ClientOptions{Addrs: []string{sentinel.Addr}, MasterName: "sluice-primary"}, &redis.Options{Timeout: testTimeout, KeyPrefix: prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, s, engine.Options{})
	l := engine.Limit{Namespace: "s", Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 2, Window: time.Hour})}
	for i := range 3 {
		d, err := e.Apply(l, "k", 1)
		if err != nil || d.Allowed != (i < 2) {
			t.Fatalf("request %d through the Sentinel: %+v, %v", i+1, d, err)
		}
	}
	if calls := primary.CommandCalls(t)["evalsha"]; calls == 0 {
		t.Fatal("the primary ran no EVALSHA: the decisions went elsewhere")
	}
}
