package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
)

// scriptCalls sums the scripts the Cluster's nodes have served (the
// commands a script calls are counted too, under their own names).
func scriptCalls(t *testing.T, c *redistest.Cluster) int64 {
	var n int64
	for _, s := range c.Nodes {
		calls := s.CommandCalls(t)
		n += calls["evalsha"] + calls["eval"]
	}
	return n
}

// TestClusterHierarchyAcrossSlots: a hierarchy organisation → team → user
// (a group of rules, decided by ApplyAll) whose levels have a caller key
// each (no tenant to count within: TestClusterHierarchyOneSlot) lies on
// different slots of a Cluster. It is still all or
// nothing: a denial at any level spends nothing at the others. What it
// costs: each slot after the first is confirmed by a compare-only script
// and each is committed by one, one round trip after another: 2n-1
// scripts for n slots (5 for three levels), where the limits of one
// caller key (one slot) take one.
func TestClusterHierarchyAcrossSlots(t *testing.T) {
	c := cluster(t)
	s := open(t, c.Addrs(), redis.Options{})
	e := newEngine(t, s, engine.Options{})
	limit := func(ns string, n int64) engine.Limit {
		return engine.Limit{Namespace: ns, Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: n, Window: time.Hour})}
	}
	org, team, user := limit("org-hour", 4), limit("team-hour", 3), limit("user-hour", 2)
	levels := func(o, tm, u string) []engine.Request {
		return []engine.Request{{Limit: org, Key: "attr:" + o, Cost: 1}, {Limit: team, Key: "attr:" + tm, Cost: 1}, {Limit: user, Key: "user:" + u, Cost: 1}}
	}
	slots := map[string]bool{}
	for _, r := range levels("acme", "acme-red", "alice") {
		slots[s.SwapGroup(engine.AppendKey(nil, r.Limit.Namespace, r.Key))] = true
	}
	if len(slots) != 3 {
		t.Fatalf("the three levels lie in %d swap groups, want 3", len(slots))
	}
	ctx := context.Background()
	for i, step := range []struct {
		org, team, user string
		allowed         []bool
	}{
		{"acme", "acme-red", "alice", []bool{true, true, false}}, // alice's 2, then her level denies
		{"acme", "acme-red", "bob", []bool{true, false}},         // red's third, then red denies
		{"acme", "acme-blue", "carol", []bool{true, false}},      // acme's fourth, then acme denies
		{"globex", "globex-red", "dave", []bool{true}},
	} {
		for j, want := range step.allowed {
			ds, all, err := e.ApplyAll(ctx, levels(step.org, step.team, step.user))
			if err != nil || all != want {
				t.Fatalf("step %d request %d: all=%v %+v, %v; want %v", i, j, all, ds, err, want)
			}
		}
	}
	// The denials spent nothing: every level holds what the admitted
	// requests spent, and no more.
	for _, tt := range []struct {
		l    engine.Limit
		key  string
		left int64
	}{
		{org, "attr:acme", 0}, {team, "attr:acme-red", 0}, {team, "attr:acme-blue", 2},
		{user, "user:alice", 0}, {user, "user:bob", 1}, {user, "user:carol", 1}, {org, "attr:globex", 3},
	} {
		d, err := e.Peek(ctx, tt.l, tt.key, 1) // Remaining: what one more would leave
		if err != nil || d.Remaining != max(tt.left-1, 0) || d.Allowed != (tt.left > 0) {
			t.Errorf("%s %s: %d left, %v; want %d", tt.l.Namespace, tt.key, d.Remaining, err, tt.left)
		}
	}
	// What a request costs, once its records exist: three levels on three
	// slots, and three limits of one caller key on one slot.
	big := func(ns string) engine.Limit { return limit("cost-"+ns, 100) }
	cost := func(reqs []engine.Request) int64 {
		if _, all, err := e.ApplyAll(ctx, reqs); err != nil || !all { // the records are written
			t.Fatalf("%v, %v", all, err)
		}
		before := scriptCalls(t, c)
		if _, all, err := e.ApplyAll(ctx, reqs); err != nil || !all {
			t.Fatalf("%v, %v", all, err)
		}
		return scriptCalls(t, c) - before
	}
	crossSlot := cost([]engine.Request{{Limit: big("org"), Key: "attr:acme", Cost: 1}, {Limit: big("team"), Key: "attr:acme-red", Cost: 1}, {Limit: big("user"), Key: "user:alice", Cost: 1}})
	oneSlot := cost([]engine.Request{{Limit: big("org"), Key: "user:erin", Cost: 1}, {Limit: big("team"), Key: "user:erin", Cost: 1}, {Limit: big("user"), Key: "user:erin", Cost: 1}})
	t.Logf("a request of three levels: %d scripts on three slots, %d on one", crossSlot, oneSlot)
	if crossSlot != 5 || oneSlot != 1 {
		t.Errorf("a request of three levels: %d scripts on three slots, %d on one; want 5 and 1", crossSlot, oneSlot)
	}
}

// TestClusterHierarchyOneSlot: through package sluice's Door, a hierarchy
// organisation → team → user (rules of one group, scoped attr:org,
// attr:team and user, keyed by package identity) keeps a caller's levels
// in one slot: the team's and the user's count within the organisation,
// under its hash tag, so a request costs ONE script, where their own keys
// would take 5. It stays all or nothing; alice in two organisations has
// two budgets; a caller without the organisation or the team is counted
// by its own keys, its levels on two slots (its IP's and its user's):
// 2n-1 = 3 scripts.
func TestClusterHierarchyOneSlot(t *testing.T) {
	cl := cluster(t)
	s := open(t, cl.Addrs(), redis.Options{})
	e := newEngine(t, s, engine.Options{})
	id, err := identity.New(identity.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := sluice.NewDoor(sluice.DoorConfig[identity.Caller]{Engine: e, OnStoreError: sluice.FailClosed,
		Key: func(who identity.Caller, r *sluice.CompiledRule) (string, int64, error) {
			k, err := id.KeyFor(r.Scope(), who, "192.0.2.1:5000", nil)
			return k, 0, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	level := func(name string, scope sluice.Scope, n int64) sluice.Rule {
		return sluice.Rule{Name: name, Group: "tree", PathPrefix: "/v1/", Scope: scope, Algorithm: algo.FixedWindowName, Limit: n, Window: time.Hour}
	}
	rs, err := sluice.NewRuleset([]sluice.Rule{
		level("org-hour", sluice.ScopeAttr("org"), 4), level("team-hour", sluice.ScopeAttr("team"), 3), level("user-hour", sluice.ScopeUser, 2),
	}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	who := func(org, team, user string) identity.Caller {
		return identity.Caller{UserID: user}.With("org", org).With("team", team)
	}
	ctx := context.Background()
	decide := func(c identity.Caller) sluice.Outcome { return d.Decide(ctx, rs, "GET", "/v1/orders", c) }
	// The slots a caller's records lie on, by the keys Usage reads (the
	// ones Decide writes).
	slots := func(c identity.Caller) map[string]bool {
		u, err := d.Usage(ctx, rs, "GET", "/v1/orders", c)
		if err != nil || len(u.Limits) != 3 {
			t.Fatalf("usage: %+v, %v", u, err)
		}
		out := map[string]bool{}
		for _, l := range u.Limits {
			out[s.SwapGroup(engine.AppendKey(nil, l.Rule.Limit().Namespace, l.Key))] = true
		}
		return out
	}
	if n := len(slots(who("acme", "red", "alice"))); n != 1 {
		t.Fatalf("alice of acme's levels lie in %d swap groups, want 1", n)
	}
	for i, step := range []struct {
		org, team, user string
		allowed         []bool
		denier          string
	}{
		{"acme", "red", "alice", []bool{true, true, false}, "user-hour"},   // alice's 2, then her level denies
		{"acme", "red", "bob", []bool{true, false}, "team-hour"},           // red's third, then red denies
		{"acme", "blue", "carol", []bool{true, false}, "org-hour"},         // acme's fourth, then acme denies
		{"globex", "red", "alice", []bool{true, true, false}, "user-hour"}, // alice in globex: another budget, and another red
	} {
		for j, want := range step.allowed {
			out := decide(who(step.org, step.team, step.user))
			if got := out.Verdict == sluice.Allowed; got != want || !want && (out.Verdict != sluice.Denied || out.Rule.Name() != step.denier) {
				t.Fatalf("step %d request %d: %v under %v (%v); want allowed %v, else denied by %s", i, j, out.Verdict, out.Rule, out.Err, want, step.denier)
			}
		}
	}
	// The denials spent nothing: each level holds what the admitted
	// requests spent, and no more, under the keys Usage reads.
	for _, tt := range []struct {
		c    identity.Caller
		left map[string]int64
	}{
		{who("acme", "red", "alice"), map[string]int64{"org-hour": 0, "team-hour": 0, "user-hour": 0}},
		{who("acme", "blue", "carol"), map[string]int64{"org-hour": 0, "team-hour": 2, "user-hour": 1}},
		{who("acme", "red", "bob"), map[string]int64{"team-hour": 0, "user-hour": 1}},
		{who("globex", "red", "alice"), map[string]int64{"org-hour": 2, "team-hour": 1, "user-hour": 0}},
	} {
		u, err := d.Usage(ctx, rs, "GET", "/v1/orders", tt.c)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range u.Limits {
			if want, ok := tt.left[l.Rule.Name()]; ok && l.Remaining != want {
				t.Errorf("%s under %s (key %s): %d left, want %d", tt.c.UserID, l.Rule.Name(), identity.ShowKey(l.Key), l.Remaining, want)
			}
		}
	}
	// The store lists the records within a tenant as the engine wrote
	// them (sluice inspect reads this).
	listed := map[string]bool{}
	if err := s.Range(nil, func(r backend.Record) bool {
		ns, key, _ := engine.SplitKey(r.Key)
		listed[ns+" "+identity.ShowKey(key)] = true
		return true
	}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"org-hour attr:acme", "team-hour {attr:acme}attr:red", "user-hour {attr:acme}user:alice", "user-hour {attr:globex}user:alice", "team-hour {attr:globex}attr:red"} {
		if !listed[k] {
			t.Errorf("Range lists no record %s; it lists %v", k, listed)
		}
	}
	// What a request costs once its records exist (its first request
	// writes them; each level allows two).
	cost := func(c identity.Caller) int64 {
		if out := decide(c); out.Verdict != sluice.Allowed {
			t.Fatalf("%+v: %v %v", c, out.Verdict, out.Err)
		}
		before := scriptCalls(t, cl)
		if out := decide(c); out.Verdict != sluice.Allowed {
			t.Fatalf("%+v: %v %v", c, out.Verdict, out.Err)
		}
		return scriptCalls(t, cl) - before
	}
	nested := cost(who("initech", "ops", "dave"))
	bare := who("", "", "erin") // counted by its IP key under both attr: levels
	n := int64(len(slots(bare)))
	own := cost(bare)
	t.Logf("a request of three levels: %d script within its organisation; %d on %d slots without one", nested, own, n)
	if nested != 1 || n != 2 || own != 2*n-1 {
		t.Errorf("a request of three levels: %d scripts within its organisation, want 1; %d on %d slots without one, want 2 slots and 2n-1", nested, own, n)
	}
}
