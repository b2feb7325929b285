package redis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/engine"
)

// TestClusterKeysOnEveryNode: over a 3-node Cluster, callers' records land
// on different nodes, and each is decided exactly as on one server.
func TestClusterKeysOnEveryNode(t *testing.T) {
	c := cluster(t)
	s := open(t, c.Addrs(), redis.Options{KeyPrefix: "nodes:"})
	e := newEngine(t, s, engine.Options{})
	l := engine.Limit{Namespace: "api", Algorithm: algo.MustNew(algo.GCRAName, algo.Params{Limit: 3, Window: time.Hour})}
	nodes := map[string]bool{}
	for i := range 30 {
		key := "user:" + string(rune('a'+i%26)) + string(rune('0'+i/26))
		for j := range 4 {
			d, err := e.Apply(context.Background(), l, key, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != (j < 3) {
				t.Fatalf("%s request %d: %+v", key, j+1, d)
			}
		}
		nodes[c.NodeOf(t, "nodes:{"+key+"}:api").Addr] = true
	}
	if len(nodes) != 3 {
		t.Fatalf("30 callers' records landed on %d nodes, want all 3", len(nodes))
	}
}

// TestClusterApplyAll: one caller's limits share a hash tag, so ApplyAll
// over them is one script; a per-user and a global limit lie on different
// slots and are committed one after another, with no CROSSSLOT error, and
// nothing is spent when the global limit denies.
func TestClusterApplyAll(t *testing.T) {
	c := cluster(t)
	s := open(t, c.Addrs(), redis.Options{KeyPrefix: "all:"})
	e := newEngine(t, s, engine.Options{})
	user := engine.Limit{Namespace: "per-user", Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 5, Window: time.Hour})}
	burst := engine.Limit{Namespace: "per-user-burst", Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 10, Window: time.Hour})}
	global := engine.Limit{Namespace: "global", Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 7, Window: time.Hour})}

	if s.SwapGroup(engine.AppendKey(nil, user.Namespace, "user:1")) != s.SwapGroup(engine.AppendKey(nil, burst.Namespace, "user:1")) {
		t.Fatal("one caller's two limits are in different swap groups")
	}
	// One caller's two limits: one script, all or nothing.
	for i := range 6 {
		_, all, err := e.ApplyAll(context.Background(), []engine.Request{{Limit: user, Key: "user:1", Cost: 1}, {Limit: burst, Key: "user:1", Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if all != (i < 5) {
			t.Fatalf("request %d: all = %v", i+1, all)
		}
	}
	// A Peek's Remaining is what would be left after spending its cost.
	if d, _ := e.Peek(context.Background(), burst, "user:1", 1); d.Remaining != 4 {
		t.Fatalf("the burst limit would have %d remaining after one more, want 4: the denied sixth request spent it", d.Remaining)
	}
	// A global limit beside per-user ones: different slots.
	allowed := 0
	for _, u := range []string{"u1", "u2", "u3", "u4"} {
		for range 3 {
			_, all, err := e.ApplyAll(context.Background(), []engine.Request{{Limit: global, Key: "all", Cost: 1}, {Limit: user, Key: u, Cost: 1}})
			if err != nil {
				t.Fatalf("ApplyAll over two slots: %v", err)
			}
			if all {
				allowed++
			}
		}
	}
	if allowed != 7 {
		t.Fatalf("12 requests under a global limit of 7 admitted %d", allowed)
	}
	// The five denied requests spent nothing on their users.
	spent := 0
	for _, u := range []string{"u1", "u2", "u3", "u4"} {
		d, _ := e.Peek(context.Background(), user, u, 1)
		spent += 5 - int(d.Remaining) - 1
	}
	if spent != 7 {
		t.Fatalf("users were charged %d units for 7 admitted requests", spent)
	}
	// A direct swap across slots is refused, not sent.
	_, _, _, err := s.CompareAndSwap(context.Background(), []backend.Swap{
		{Key: engine.AppendKey(nil, "a", "x"), Value: []byte("1"), TTL: time.Minute},
		{Key: engine.AppendKey(nil, "a", "y"), Value: []byte("1"), TTL: time.Minute},
	})
	if !errors.Is(err, redis.ErrCrossSlot) {
		t.Fatalf("a swap over two hash tags: %v, want ErrCrossSlot", err)
	}
}

// TestClusterContention: three clients of a Cluster, eight goroutines each,
// on one key admit exactly the limit.
func TestClusterContention(t *testing.T) {
	c := cluster(t)
	l := engine.Limit{Namespace: "c", Algorithm: algo.MustNew(algo.SlidingLogName, algo.Params{Limit: 50, Window: time.Hour})}
	var engines []*engine.Engine
	for range 3 {
		engines = append(engines, newEngine(t, open(t, c.Addrs(), redis.Options{KeyPrefix: "cc:"}), engine.Options{}))
	}
	done := make(chan int)
	for _, e := range engines {
		for range 8 {
			go func() {
				n := 0
				for range 10 {
					d, err := e.Apply(context.Background(), l, "hot", 1)
					if err != nil {
						t.Error(err)
					}
					if d.Allowed {
						n++
					}
				}
				done <- n
			}()
		}
	}
	total := 0
	for range 24 {
		total += <-done
	}
	if total != 50 {
		t.Fatalf("3 clients × 8 goroutines × 10 tries on a Cluster admitted %d, want 50", total)
	}
}

// A Cluster node that does not answer fails only the ApplyAll calls of
// its slots, and the error names the request it concerns
// (engine.RequestError), so that a door counts it under that request's
// rule rather than another's.
func TestClusterApplyAllNamesTheFailedRequest(t *testing.T) {
	c := cluster(t)
	s := open(t, c.Addrs(), redis.Options{KeyPrefix: "fail:", Timeout: 300 * time.Millisecond})
	e := newEngine(t, s, engine.Options{})
	user := engine.Limit{Namespace: "per-user", Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 5, Window: time.Hour})}
	global := engine.Limit{Namespace: "global", Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 7, Window: time.Hour})}
	userNode := c.NodeOf(t, "fail:{user:1}:per-user")
	var globalKey string
	for i := range 100 {
		k := fmt.Sprintf("g%d", i)
		if c.NodeOf(t, "fail:{"+k+"}:global") != userNode {
			globalKey = k
			break
		}
	}
	if globalKey == "" {
		t.Fatal("no global key on another node than the user's")
	}
	reqs := []engine.Request{{Limit: user, Key: "user:1", Cost: 1}, {Limit: global, Key: globalKey, Cost: 1}}
	if _, all, err := e.ApplyAll(context.Background(), reqs); err != nil || !all {
		t.Fatalf("with every node up: %v, %v", all, err)
	}
	paused := c.NodeOf(t, "fail:{"+globalKey+"}:global")
	paused.Pause()
	_, _, err := e.ApplyAll(context.Background(), reqs)
	paused.Resume()
	var re *engine.RequestError
	if !errors.As(err, &re) || re.Request != 1 || !errors.Is(err, engine.ErrStore) {
		t.Fatalf("with the global limit's node stopped: %v, want a RequestError of request 1 that is a store error", err)
	}
}
