package redis_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/engine"
)

// usageWhere are the Redis deployments Door.Usage is read through: the
// shared standalone server and the shared 3-node Cluster. Each returns the
// addresses to open a store on and the nodes that hold keys.
var usageWhere = map[string]func(t *testing.T) (addrs, nodes []string){
	"standalone": func(t *testing.T) ([]string, []string) {
		a := []string{server(t).Addr}
		return a, a
	},
	"cluster": func(t *testing.T) ([]string, []string) {
		a := cluster(t).Addrs()
		return a, a
	},
}

// usageKey is the door's Key: "user:" and the caller.
func usageKey(user string, _ *sluice.CompiledRule) (string, int64, error) {
	if user == "" {
		return "", 0, errors.New("no user")
	}
	return "user:" + user, 0, nil
}

// usageDoor returns a door over a Redis store on addrs (under prefix,
// on the engine's fake clock) and the clock.
func usageDoor(t *testing.T, addrs []string, prefix string) (*sluice.Door[string], *engine.FakeClock) {
	t.Helper()
	clock := engine.NewFakeClock(time.Now().Truncate(time.Second))
	s := open(t, addrs, redis.Options{KeyPrefix: prefix, EngineClock: true})
	e, err := engine.New(s, &engine.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	d, err := sluice.NewDoor(sluice.DoorConfig[string]{Engine: e, Key: usageKey, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return d, clock
}

// keysUnder returns the keys under prefix on every node, sorted.
func keysUnder(t *testing.T, nodes []string, prefix string) []string {
	t.Helper()
	var keys []string
	for _, n := range nodes {
		ks, err := client(t, n).Keys(context.Background(), prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, ks...)
	}
	slices.Sort(keys)
	return keys
}

// Usage read through the Redis store, standalone and on a 3-node Cluster,
// for every rate algorithm and for a concurrency rule: reading a caller
// never seen writes no key (the servers' keys under the test's prefix are
// the same before and after, checked with a client of their own), and
// after requests what Door.Usage says is what the next decision sees: its
// Remaining one less than Usage's when admitted, its Retry-After when
// denied; reading twice agrees and writes nothing.
func TestDoorUsageOnRedis(t *testing.T) {
	ctx := context.Background()
	for where, at := range usageWhere {
		for _, a := range algo.Names {
			t.Run(where+"/"+string(a), func(t *testing.T) {
				addrs, nodes := at(t)
				pfx := prefix(t)
				d, clock := usageDoor(t, addrs, pfx)
				rs, err := sluice.NewRuleset([]sluice.Rule{{Name: "orders", PathPrefix: "/orders", Scope: sluice.ScopeUser, Algorithm: a, Limit: 5, Window: time.Minute}}, nil, "")
				if err != nil {
					t.Fatal(err)
				}
				// Someone else's record, so that "no new key" is judged
				// on a prefix that holds keys.
				if out := d.Decide(ctx, rs, "GET", "/orders", "bob"); out.Verdict != sluice.Allowed {
					t.Fatalf("bob's first request: %v", out.Verdict)
				}
				before := keysUnder(t, nodes, pfx)
				if len(before) == 0 {
					t.Fatalf("no key under %q after bob's request: the check below would see nothing", pfx)
				}
				u, err := d.Usage(ctx, rs, "GET", "/orders", "alice")
				if err != nil {
					t.Fatal(err)
				}
				if l := u.Limits[0]; l.Key != "user:alice" || l.Remaining != 5 || l.Limit != 5 || !l.Allowed || l.InUse != 0 {
					t.Errorf("a caller never seen: %+v, want 5 of 5 left, allowed", l.LimitState)
				}
				if after := keysUnder(t, nodes, pfx); !slices.Equal(before, after) {
					t.Fatalf("Usage of a caller never seen changed the keys: %q, then %q", before, after)
				}
				for step := range 9 {
					u, err := d.Usage(ctx, rs, "GET", "/orders", "alice")
					if err != nil {
						t.Fatal(err)
					}
					keys := keysUnder(t, nodes, pfx)
					again, err := d.Usage(ctx, rs, "GET", "/orders", "alice")
					if err != nil {
						t.Fatal(err)
					}
					if x, y := u.Limits[0], again.Limits[0]; x.Remaining != y.Remaining || x.Allowed != y.Allowed || x.RetryAfter != y.RetryAfter || x.Reset != y.Reset {
						t.Fatalf("step %d: reading twice differs: %+v then %+v", step, x.LimitState, y.LimitState)
					}
					if after := keysUnder(t, nodes, pfx); !slices.Equal(keys, after) {
						t.Fatalf("step %d: Usage changed the keys: %q, then %q", step, keys, after)
					}
					lu := u.Limits[0]
					out := d.Decide(ctx, rs, "GET", "/orders", "alice")
					if lu.Allowed != (out.Verdict == sluice.Allowed) {
						t.Fatalf("step %d: usage allowed=%v (%+v), then the request was %v", step, lu.Allowed, lu.LimitState, out.Verdict)
					}
					if lu.Allowed && out.Decision.Remaining != lu.Remaining-1 {
						t.Errorf("step %d: usage remaining %d, the next request left %d, want %d", step, lu.Remaining, out.Decision.Remaining, lu.Remaining-1)
					}
					if !lu.Allowed && (lu.Remaining != 0 || out.Decision.RetryAfter != lu.RetryAfter) {
						t.Errorf("step %d: usage %+v, denied with retry %v", step, lu.LimitState, out.Decision.RetryAfter)
					}
					if step%3 == 2 {
						clock.Advance(7 * time.Second)
					}
				}
			})
		}
		t.Run(where+"/concurrency", func(t *testing.T) {
			addrs, nodes := at(t)
			pfx := prefix(t)
			d, _ := usageDoor(t, addrs, pfx)
			rs, err := sluice.NewRuleset([]sluice.Rule{{Name: "uploads", PathPrefix: "/up", Scope: sluice.ScopeUser, Algorithm: algo.ConcurrencyName, Limit: 3, MaxHold: time.Minute}}, nil, "")
			if err != nil {
				t.Fatal(err)
			}
			bob := d.Decide(ctx, rs, "POST", "/up", "bob")
			if bob.Verdict != sluice.Allowed || bob.Held == nil {
				t.Fatalf("bob's upload: %v, want allowed, holding a slot", bob.Verdict)
			}
			before := keysUnder(t, nodes, pfx)
			if u, err := d.Usage(ctx, rs, "POST", "/up", "alice"); err != nil || u.Limits[0].InUse != 0 || u.Limits[0].Remaining != 3 {
				t.Fatalf("a caller never seen: %+v (%v), want 3 free", u, err)
			}
			if after := keysUnder(t, nodes, pfx); !slices.Equal(before, after) {
				t.Fatalf("Usage of a caller never seen changed the keys: %q, then %q", before, after)
			}
			var held []*sluice.Held
			for i := range 3 {
				u, err := d.Usage(ctx, rs, "POST", "/up", "alice")
				if err != nil {
					t.Fatal(err)
				}
				out := d.Decide(ctx, rs, "POST", "/up", "alice")
				if out.Verdict != sluice.Allowed || out.Held == nil || u.Limits[0].InUse != int64(i) || out.Decision.Remaining != u.Limits[0].Remaining-1 {
					t.Fatalf("upload %d: usage %+v, then %v with %d left; want allowed, %d in use before, one fewer left after", i, u.Limits[0].LimitState, out.Verdict, out.Decision.Remaining, i)
				}
				held = append(held, out.Held)
			}
			u, err := d.Usage(ctx, rs, "POST", "/up", "alice")
			if err != nil {
				t.Fatal(err)
			}
			if l := u.Limits[0]; l.Allowed || l.InUse != 3 || l.Remaining != 0 {
				t.Errorf("three uploads held: %+v, want 3 in use, none free, not allowed", l.LimitState)
			}
			if out := d.Decide(ctx, rs, "POST", "/up", "alice"); out.Verdict == sluice.Allowed {
				t.Errorf("a fourth upload after usage said none is free: %v", out.Verdict)
			}
			d.Release(ctx, held[0])
			if u, _ := d.Usage(ctx, rs, "POST", "/up", "alice"); u.Limits[0].InUse != 2 || !u.Limits[0].Allowed {
				t.Errorf("after a release: %+v, want 2 in use, allowed", u.Limits[0].LimitState)
			}
		})
	}
}
