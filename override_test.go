package sluice_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

func TestOverrideValidation(t *testing.T) {
	orders := rule("orders", "POST", "/api/orders")
	orders.Algorithm, orders.Limit, orders.Cost = algo.TokenBucketName, 10, 4
	byKey := rule("by-key", "GET", "/k")
	byKey.Scope = sluice.ScopeAPIKey
	global := rule("everyone", "GET", "/g")
	global.Scope = sluice.ScopeGlobal
	byIP := rule("by-ip", "GET", "/ip")
	byIP.Scope = sluice.ScopeIP
	window := rule("window", "GET", "/w")
	window.Algorithm = algo.FixedWindowName
	def := rule("catch-all", "", "")
	rs := mustRuleset(t, []sluice.Rule{orders, byKey, global, byIP, window}, &def, "")

	for _, tt := range []struct {
		name  string
		ovs   []sluice.Override
		index int
		field string
	}{
		{"no rule", []sluice.Override{{Key: "user:a", Limit: 1}}, 0, "rule"},
		{"an unknown rule", []sluice.Override{{Rule: "order", Key: "user:a", Limit: 1}}, 0, "rule"},
		{"no caller", []sluice.Override{{Rule: "orders", Limit: 1}}, 0, "caller"},
		{"a key caller on a user rule", []sluice.Override{{Rule: "orders", Key: "key:0123", Limit: 20}}, 0, "caller"},
		{"a user caller on a key rule", []sluice.Override{{Rule: "by-key", Key: "user:a", Limit: 20}}, 0, "caller"},
		{"a user caller on an ip rule", []sluice.Override{{Rule: "by-ip", Key: "user:a", Limit: 20}}, 0, "caller"},
		{"a global rule", []sluice.Override{{Rule: "everyone", Key: "global", Limit: 20}}, 0, "caller"},
		{"an unknown kind of caller", []sluice.Override{{Rule: "orders", Key: "tenant:a", Limit: 20}}, 0, "caller"},
		{"an empty user id", []sluice.Override{{Rule: "orders", Key: "user:", Limit: 20}}, 0, "caller"},
		{"nothing changed", []sluice.Override{{Rule: "orders", Key: "user:a"}}, 0, "limit"},
		{"a negative limit", []sluice.Override{{Rule: "orders", Key: "user:a", Limit: -1}}, 0, "limit"},
		{"a negative window", []sluice.Override{{Rule: "orders", Key: "user:a", Window: -time.Second}}, 0, "window"},
		{"a burst on a window algorithm", []sluice.Override{{Rule: "window", Key: "user:a", Burst: 3}}, 0, "burst"},
		{"a capacity below the rule's cost", []sluice.Override{{Rule: "orders", Key: "user:a", Limit: 3}}, 0, "cost"},
		{"one caller twice on one rule", []sluice.Override{
			{Rule: "orders", Key: "user:a", Limit: 20},
			{Rule: "catch-all", Key: "user:a", Limit: 20},
			{Rule: "orders", Key: "user:a", Limit: 30},
		}, 2, "caller"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rs.WithOverrides(tt.ovs)
			var oe *sluice.OverrideError
			if !errors.As(err, &oe) || oe.Index != tt.index || oe.Field != tt.field {
				t.Fatalf("WithOverrides: %v, want an OverrideError at index %d on field %q", err, tt.index, tt.field)
			}
			if !errors.Is(err, sluice.ErrInvalidConfig) {
				t.Errorf("%v does not match ErrInvalidConfig", err)
			}
		})
	}
	// An ip: caller fits an ip rule and, for anonymous callers, user and
	// api_key rules; the default takes overrides by its name.
	if _, err := rs.WithOverrides([]sluice.Override{
		{Rule: "by-ip", Key: "ip:192.0.2.1", Limit: 50},
		{Rule: "orders", Key: "ip:192.0.2.1", Limit: 50},
		{Rule: "by-key", Key: "ip:2001:db8::/64", Limit: 50},
		{Rule: "catch-all", Key: "user:a", Limit: 50},
	}); err != nil {
		t.Errorf("valid overrides: %v", err)
	}
}

// An override is the rule with the caller's limit: same name, namespace,
// algorithm, scope and cost; other callers, and the ruleset it came from,
// keep the rule.
func TestOverrideReplacesTheLimitOnly(t *testing.T) {
	orders := rule("orders", "POST", "/api/orders")
	orders.Algorithm, orders.Limit, orders.Burst, orders.Cost = algo.TokenBucketName, 60, 10, 2
	base := mustRuleset(t, []sluice.Rule{orders}, nil, "")
	rs, err := base.WithOverrides([]sluice.Override{{Rule: "orders", Key: "user:alice", Limit: 600, Burst: 100}})
	if err != nil {
		t.Fatal(err)
	}
	c := rs.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: "/api/orders"})[0]
	if got := rs.Override(c, "user:bob"); got != c {
		t.Errorf("Override for bob = %v, want the rule itself", got.Rule())
	}
	o := rs.Override(c, "user:alice")
	r := o.Rule()
	if o == c || r.Limit != 600 || r.Burst != 100 || r.Window != time.Minute {
		t.Fatalf("alice's override: %+v, want limit 600 burst 100 window 1m", r)
	}
	if o.Name() != "orders" || o.Limit().Namespace != "orders" || r.Algorithm != algo.TokenBucketName || o.Scope() != sluice.ScopeUser || o.Cost() != 2 {
		t.Errorf("alice's override: %+v, want the rule's name, namespace, algorithm, scope and cost", r)
	}
	if got := base.Override(base.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: "/api/orders"})[0], "user:alice"); got.Rule().Limit != 60 {
		t.Errorf("the ruleset WithOverrides was called on has an override: limit %d", got.Rule().Limit)
	}
	if got := sluice.Overrides(rs); len(got) != 1 || got[0].Key != "user:alice" {
		t.Errorf("Overrides() = %+v", got)
	}
	// A Door applies it.
	door, err := sluice.NewDoor(sluice.DoorConfig[string]{
		Engine: newTestEngine(t),
		Key:    func(user string, _ *sluice.CompiledRule) (string, int64, error) { return user, 0, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if out := door.Decide(context.Background(), rs, "POST", "/api/orders", "user:alice"); out.Verdict != sluice.Allowed || out.Rule != o || out.Key != "user:alice" {
		t.Errorf("a Door for alice: %v under %v, key %q; want allowed under her override", out.Verdict, out.Rule.Rule(), out.Key)
	}
}

// Giving a caller an override, changing it and removing it on reloads keeps
// what the caller has spent, for every algorithm: the record is the rule's.
func TestOverrideKeepsTheSpentBudget(t *testing.T) {
	for _, name := range algo.Names {
		t.Run(string(name), func(t *testing.T) {
			clock := engine.NewFakeClock(t0)
			e, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			r := rule("orders", "POST", "/api/orders")
			r.Algorithm, r.Limit, r.Window = name, 4, time.Hour
			base := mustRuleset(t, []sluice.Rule{r}, nil, "")
			reg := sluice.NewRegistry(base)
			spend := func(n int) (allowed int, last algo.Decision) {
				t.Helper()
				for range n {
					rs := reg.Ruleset()
					c := rs.Override(rs.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: "/api/orders"})[0], "user:alice")
					d, err := e.Apply(context.Background(), c.Limit(), "user:alice", c.Cost())
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						allowed++
					}
					last = d
				}
				return allowed, last
			}
			if n, _ := spend(3); n != 3 {
				t.Fatalf("under the rule's 4: %d of 3 allowed", n)
			}
			// Raised to 10 for alice: 7 more, not 10.
			up, err := base.WithOverrides([]sluice.Override{{Rule: "orders", Key: "user:alice", Limit: 10}})
			if err != nil {
				t.Fatal(err)
			}
			reg.Swap(up)
			if n, d := spend(8); n != 7 || d.Allowed || d.Limit != 10 {
				t.Errorf("raised to 10 after 3 spent: %d of 8 allowed (last limit %d), want 7 and a denial under 10", n, d.Limit)
			}
			// The override removed: she is over the rule's 4 now.
			reg.Swap(base)
			if n, d := spend(1); n != 0 || d.Limit != 4 {
				t.Errorf("back under the rule after 10 spent: %d allowed (limit %d), want a denial under 4", n, d.Limit)
			}
		})
	}
}
