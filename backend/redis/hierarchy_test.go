package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/engine"
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
// (a group of rules, decided by ApplyAll) has a caller key per level, so
// its levels lie on different slots of a Cluster. It is still all or
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
