package redis_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"sync"
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
	d, err := e.Apply(context.Background(), l, key, 1)
	if took := time.Since(start); took > timeout+ceiling {
		t.Fatalf("a decision took %v with a %v deadline", took, timeout)
	}
	return d, err
}

var failLimit = engine.Limit{Namespace: "f", Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 1000, Window: time.Second})}

// TestHungServerKeepsTheDeadline: a redis-server that stops answering
// (SIGSTOP: connections are accepted, nothing replies) fails every
// decision of 16 concurrent callers within its deadline, with an ErrStore
// wrapping context.DeadlineExceeded or, once enough have failed, the
// breaker's ErrUnavailable; a store opened while the server is stopped
// (every connection new, its dial and handshake under the deadline too)
// does the same. Once the server answers again, decisions work at once:
// the breaker's probe closes it at the first answer.
func TestHungServerKeepsTheDeadline(t *testing.T) {
	srv := redistest.Start(t)
	timeout := 50 * time.Millisecond
	warm := open(t, []string{srv.Addr}, redis.Options{Timeout: timeout})
	e := newEngine(t, warm, engine.Options{})
	if d, err := e.Apply(context.Background(), failLimit, "k", 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	// A second store whose pool holds no connection yet: opened (its
	// first ping and script load) before the pause, used after it.
	cold := open(t, []string{srv.Addr}, redis.Options{Timeout: timeout})
	ec := newEngine(t, cold, engine.Options{})
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	for _, tc := range []struct {
		name string
		e    *engine.Engine
	}{{"warm pool", e}, {"new connections", ec}} {
		var wg sync.WaitGroup
		errs := make(chan error, 16*8)
		for c := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 8 {
					start := time.Now()
					_, err := tc.e.Apply(context.Background(), failLimit, "k"+strconv.Itoa(c*8+i), 1)
					if took := time.Since(start); took > timeout+ceiling {
						errs <- fmt.Errorf("a decision took %v with a %v deadline", took, timeout)
						return
					}
					if !errors.Is(err, engine.ErrStore) || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrUnavailable)) {
						errs <- fmt.Errorf("a call to a hung server: %v, want ErrStore wrapping DeadlineExceeded or ErrUnavailable", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	if b := warm.Breaker(); !b.Open || b.Opened == 0 || b.Rejected == 0 {
		t.Fatalf("after 128 failed calls the breaker is %+v, want open, having rejected some", b)
	}
	srv.Resume()
	resumed = true
	back := time.Now()
	for _, e := range []*engine.Engine{e, ec} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			d, err := decideWithin(t, e, failLimit, "after", timeout)
			if err == nil && d.Allowed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("10s after the server came back: %v", err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.Logf("decisions work %v after the server came back; breaker %+v", time.Since(back), warm.Breaker())
	if b := warm.Breaker(); b.Open {
		t.Fatalf("the breaker is still open after a decision succeeded: %+v", b)
	}
}

// breakerTimeout is the store deadline of the breaker tests. Their calls
// on a stopped server fail whatever it is; their calls on a live one (the
// probes among them) must be answered within it on a machine whose two
// cores are busy elsewhere, where a redis-server resumed from SIGSTOP was
// seen to take over 20ms: so it is far above a loopback answer, at the
// cost of a quarter second per call the tests make fail.
const breakerTimeout = 250 * time.Millisecond

// TestBreakerNeedsAVolume: failures below the breaker's minimum volume of
// calls do not open it, whatever their share; past it, a share of
// failures below its rate does not either.
func TestBreakerNeedsAVolume(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, []string{srv.Addr}, redis.Options{Timeout: breakerTimeout, BreakerMinCalls: 12, BreakerFailureRate: 0.5, BreakerWindow: time.Hour})
	e := newEngine(t, s, engine.Options{})
	if _, err := e.Apply(context.Background(), failLimit, "first", 1); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	for i := range 9 {
		if _, err := e.Apply(context.Background(), failLimit, "v"+strconv.Itoa(i), 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d: %v, want DeadlineExceeded", i+1, err)
		}
	}
	if b := s.Breaker(); b.Open {
		t.Fatalf("9 failures under a volume of 12 opened the breaker: %+v", b)
	}
	srv.Resume()
	for i := 0; s.Breaker().Calls < 20; i++ {
		if _, err := e.Apply(context.Background(), failLimit, "w"+strconv.Itoa(i), 1); err != nil {
			t.Fatal(err)
		}
	}
	srv.Pause()
	// 20 calls, 9 failed: below half. The tenth failure makes 10 of 21.
	if b := s.Breaker(); b.Open || b.Failures != 9 || b.Calls != 20 {
		t.Fatalf("the breaker after 9 failures of 20 calls: %+v", b)
	}
	e.Apply(context.Background(), failLimit, "x", 1)
	if b := s.Breaker(); b.Open {
		t.Fatalf("10 failures of 21 calls opened the breaker: %+v", b)
	}
	e.Apply(context.Background(), failLimit, "y", 1)
	srv.Resume()
	if b := s.Breaker(); !b.Open || b.Opened != 1 {
		t.Fatalf("11 failures of 22 calls left the breaker closed: %+v", b)
	}
	// Open: the next call is the probe, which Redis answers.
	if _, err := e.Apply(context.Background(), failLimit, "z", 1); err != nil {
		t.Fatalf("the probe: %v", err)
	}
	if b := s.Breaker(); b.Open {
		t.Fatalf("an answered probe left the breaker open: %+v", b)
	}
}

// TestBreakerWeighsTheKeys: a compare-and-swap over several keys (an
// ApplyAll, or calls the engine commits together on a shared key) weighs
// as its keys: two failed calls over six keys each reach a volume of 12
// and open the breaker, where two single-key calls would not.
func TestBreakerWeighsTheKeys(t *testing.T) {
	srv := redistest.Start(t)
	var mu sync.Mutex
	var changes []bool
	s := open(t, []string{srv.Addr}, redis.Options{Timeout: breakerTimeout, BreakerMinCalls: 12, BreakerFailureRate: 0.5, BreakerWindow: time.Hour,
		BreakerChanged: func(open bool) { mu.Lock(); changes = append(changes, open); mu.Unlock() }})
	e := newEngine(t, s, engine.Options{})
	if _, err := e.Apply(context.Background(), failLimit, "first", 1); err != nil {
		t.Fatal(err)
	}
	reqs := func(call string) []engine.Request {
		var out []engine.Request
		for k := range 6 {
			out = append(out, engine.Request{Limit: failLimit, Key: call + strconv.Itoa(k), Cost: 1})
		}
		return out
	}
	srv.Pause()
	defer srv.Resume()
	for _, call := range []string{"a", "b"} {
		if _, _, err := e.ApplyAll(context.Background(), reqs(call)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ApplyAll %s over a stopped server: %v, want DeadlineExceeded", call, err)
		}
	}
	if b := s.Breaker(); !b.Open || b.Failures != 12 {
		t.Fatalf("two failed calls over six keys each: %+v; want the breaker open on 12 failures", b)
	}
	// Redis back: the probe closes it, and BreakerChanged heard both.
	srv.Resume()
	if _, err := e.Apply(context.Background(), failLimit, "probe", 1); err != nil {
		t.Fatalf("the probe: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(changes) != "[true false]" {
		t.Fatalf("BreakerChanged heard %v, want [true false]: opened, then closed", changes)
	}
}

// TestSlowServerKeepsTheDeadline: while the server holds every command
// (CLIENT PAUSE, as a server busy with a slow script or a fork would), a
// decision fails at its deadline; once the pause ends, the next decision
// works.
func TestSlowServerKeepsTheDeadline(t *testing.T) {
	srv := redistest.Start(t)
	timeout := 50 * time.Millisecond
	e := newEngine(t, open(t, []string{srv.Addr}, redis.Options{Timeout: timeout, BreakerMinCalls: -1}), engine.Options{})
	if _, err := e.Apply(context.Background(), failLimit, "k", 1); err != nil {
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
		d, err := e.Apply(context.Background(), failLimit, "k", 1)
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
// EVAL after NOSCRIPT (for a record that exists: a fresh one is a SET NX),
// and the engine, whose last-seen record no longer
// matches, learns the empty key from the mismatch.
func TestRestartedServer(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, open(t, []string{srv.Addr}, redis.Options{Timeout: 100 * time.Millisecond}), engine.Options{})
	l := engine.Limit{Namespace: "r", Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 3, Window: time.Hour})}
	for range 2 {
		e.Apply(context.Background(), l, "k", 1)
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
		d, err := e.Apply(context.Background(), l, "k", 1)
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
	// That first write needed no script (a fresh record is SET NX); the
	// next one steps the record it wrote, with the script the restarted
	// server has never seen.
	if d, err := e.Apply(context.Background(), l, "k", 1); err != nil || !d.Allowed || d.Remaining != 1 {
		t.Fatalf("second decision after the restart: %+v, %v", d, err)
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
		d, err := e.Apply(context.Background(), l, "k", 1)
		if err != nil || d.Allowed != (i < 2) {
			t.Fatalf("request %d through the Sentinel: %+v, %v", i+1, d, err)
		}
	}
	if calls := primary.CommandCalls(t)["evalsha"]; calls == 0 {
		t.Fatal("the primary ran no EVALSHA: the decisions went elsewhere")
	}
}

// A Redis that answers but refuses the login, and one that does not speak
// the TLS the store was told to use, fail Open at once, each with its own
// error, not as a Redis that does not answer.
func TestOpenSaysWhatFailed(t *testing.T) {
	srv := redistest.Start(t)
	srv.Do(t, "CONFIG", "SET", "requirepass", "s3cret")
	for _, c := range []struct {
		name string
		o    redis.ClientOptions
		want error
	}{
		{"wrong password", redis.ClientOptions{Addrs: []string{srv.Addr}, Password: "wrong"}, redis.ErrLogin},
		{"no password", redis.ClientOptions{Addrs: []string{srv.Addr}}, redis.ErrLogin},
		{"TLS to a plain server", redis.ClientOptions{Addrs: []string{srv.Addr}, Password: "s3cret", TLS: &tls.Config{ServerName: "redis.internal"}}, redis.ErrTLS},
	} {
		start := time.Now()
		s, err := redis.Open(c.o, &redis.Options{KeyPrefix: prefix(t), ConnectTimeout: 3 * time.Second})
		if err == nil {
			s.Close()
			t.Fatalf("%s: Open succeeded", c.name)
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want it to wrap %v", c.name, err, c.want)
		}
		// A plain server never answers a TLS hello: the handshake times
		// out, which a slow server would too, so that one is tried for
		// the connect timeout.
		if took := time.Since(start); took >= 3*time.Second && c.want != redis.ErrTLS {
			t.Errorf("%s: Open took %v, its whole connect timeout: a refusal is final", c.name, took)
		}
	}
	s, err := redis.Open(redis.ClientOptions{Addrs: []string{srv.Addr}, Password: "s3cret"}, &redis.Options{KeyPrefix: prefix(t)})
	if err != nil {
		t.Fatalf("the right password: %v", err)
	}
	s.Close()
}
