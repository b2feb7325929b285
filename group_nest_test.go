package sluice_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
)

// tenantKey is the key function of a door whose callers are
// "org/team/user", as package identity keys them: an organisation or team
// missing is counted by the caller's IP key, as a missing attribute is.
func tenantKey(c call, r *sluice.CompiledRule) (string, int64, error) {
	org, rest, _ := strings.Cut(c.user, "/")
	team, user, _ := strings.Cut(rest, "/")
	v := user
	switch r.Scope() {
	case sluice.ScopeAttr("org"):
		v = org
	case sluice.ScopeAttr("team"):
		v = team
	case sluice.ScopeGlobal:
		return "global", 0, nil
	}
	if v == "" {
		return "ip:192.0.2.1", 0, nil
	}
	if r.Scope() == sluice.ScopeUser {
		return "user:" + v, 0, nil
	}
	return "attr:" + v, 0, nil
}

// month is a fixed window rule of limit per calendar month in group g.
func month(name, g string, scope sluice.Scope, limit int64) sluice.Rule {
	return sluice.Rule{Name: name, Group: g, PathPrefix: "/v1/", Scope: scope, Algorithm: algo.FixedWindowName, Limit: limit, Calendar: "month"}
}

// A level narrower than its group's tenant (the widest attr: or header:
// level the caller has) counts within the tenant: alice in acme and alice
// in globex are two budgets, alice in no organisation a third; a team of
// one name in two organisations is two teams. Without the organisation
// the team is the tenant. What Usage reads is what Decide spends.
func TestGroupCountsWithinTenant(t *testing.T) {
	e := newTestEngine(t)
	d := newTestDoor(t, e, func(c *sluice.DoorConfig[call]) { c.Key = tenantKey })
	rs := mustRuleset(t, []sluice.Rule{
		month("org", "tree", sluice.ScopeAttr("org"), 100),
		month("team", "tree", sluice.ScopeAttr("team"), 3),
		month("user", "tree", sluice.ScopeUser, 2),
	}, nil, "")
	ctx := context.Background()
	spend := func(who string) int {
		n := 0
		for range 4 {
			if out := d.Decide(ctx, rs, "GET", "/v1/a", call{user: who}); out.Verdict == sluice.Allowed {
				n++
			}
		}
		return n
	}
	for i, step := range []struct {
		who  string
		want int
	}{
		{"acme/red/alice", 2},
		{"globex/red/alice", 2}, // another organisation: alice's own budget there, and another team red
		{"//alice", 2},          // no organisation: her own key
		{"/red/alice", 2},       // no organisation: within the team red, its own tenant
		{"acme/red/bob", 1},     // acme's red has one left
		{"/red/bob", 1},         // the red of no organisation has one left
	} {
		if got := spend(step.who); got != step.want {
			t.Fatalf("step %d: %s spent %d of 4, want %d", i, step.who, got, step.want)
		}
	}
	u, err := d.Usage(ctx, rs, "GET", "/v1/a", call{user: "acme/red/alice"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		key  string
		left int64
	}{
		"org":  {"attr:acme", 97},
		"team": {sluice.NestedKey("attr:acme", "attr:red"), 0},
		"user": {sluice.NestedKey("attr:acme", "user:alice"), 0},
	}
	for _, l := range u.Limits {
		w := want[l.Rule.Name()]
		if l.Key != w.key || l.Remaining != w.left {
			t.Errorf("usage under %s: key %q, %d left; want %q, %d", l.Rule.Name(), l.Key, l.Remaining, w.key, w.left)
		}
		if rec, err := e.Record(ctx, l.Rule.Limit(), w.key); err != nil || rec == nil {
			t.Errorf("%s: no record under %q (%v): usage reads another than Decide wrote", l.Rule.Name(), w.key, err)
		}
	}
	if len(u.Limits) != 3 {
		t.Fatalf("usage: %d limits, want 3", len(u.Limits))
	}
	// Each budget is spent where the model says: alice's own key by
	// //alice, the team red of no organisation's own key as the tenant of
	// /red/alice and /red/bob, alice within it and within globex.
	limit := func(name string) engine.Limit {
		for _, c := range rs.Rules() {
			if c.Name() == name {
				return c.Limit()
			}
		}
		t.Fatalf("no rule %s", name)
		return engine.Limit{}
	}
	for _, k := range []struct {
		rule, key string
		left      int64
	}{
		{"user", "user:alice", 0},
		{"team", "attr:red", 0},
		{"user", sluice.NestedKey("attr:red", "user:alice"), 0},
		{"user", sluice.NestedKey("attr:red", "user:bob"), 1},
		{"user", sluice.NestedKey("attr:globex", "user:alice"), 0},
		{"team", sluice.NestedKey("attr:globex", "attr:red"), 1},
		{"org", "ip:192.0.2.1", 95},
	} {
		st, err := sluice.PeekState(ctx, e, limit(k.rule), k.key, 1)
		if err != nil || st.Remaining != k.left {
			t.Errorf("%s %q: %d left, %v; want %d", k.rule, k.key, st.Remaining, err, k.left)
		}
	}
}

// A key beginning with a NUL byte is the form of a level's key within its
// tenant: a door's Key making one is refused, so that no caller poses as
// another within a tenant.
func TestGroupRefusesNULKey(t *testing.T) {
	d := newTestDoor(t, newTestEngine(t), func(c *sluice.DoorConfig[call]) {
		c.Key = func(c call, _ *sluice.CompiledRule) (string, int64, error) { return c.user, 0, nil }
	})
	rs := mustRuleset(t, []sluice.Rule{tokenRule("r", "/", 10)}, nil, "")
	out := d.Decide(context.Background(), rs, "GET", "/", call{user: sluice.NestedKey("attr:acme", "user:alice")})
	var ke *sluice.KeyError
	if out.Verdict != sluice.Unidentified || !errors.As(out.Err, &ke) {
		t.Fatalf("a NUL key: %v, %v; want Unidentified with a KeyError", out.Verdict, out.Err)
	}
}

// A customer moved to another plan mid-month keeps what it spent, with its
// users counted within it: the plan's rules name the counters of the
// plan-less ones.
func TestGroupPlanChangeKeepsNestedSpending(t *testing.T) {
	d := newTestDoor(t, newTestEngine(t), func(c *sluice.DoorConfig[call]) { c.Key = tenantKey })
	org, user := month("org-month", "tree", sluice.ScopeAttr("org"), 10), month("user-month", "tree", sluice.ScopeUser, 4)
	org.Counter, user.Counter = "org-month", "user-month"
	orgPro, userPro := org, user
	orgPro.Name, orgPro.Plan, orgPro.Limit = "org-month-pro", "pro", 20
	userPro.Name, userPro.Plan, userPro.Limit = "user-month-pro", "pro", 8
	rs := mustRuleset(t, []sluice.Rule{org, orgPro, user, userPro}, nil, "")
	ctx := context.Background()
	spent := 0
	for range 6 {
		if d.Decide(ctx, rs, "GET", "/v1/a", call{user: "acme//alice"}).Verdict == sluice.Allowed {
			spent++
		}
	}
	if spent != 4 {
		t.Fatalf("alice on no plan spent %d, want her 4", spent)
	}
	u, err := d.Usage(ctx, rs, "GET", "/v1/a", call{user: "acme//alice", plan: "pro"})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range u.Limits {
		want := map[string]int64{"org-month-pro": 16, "user-month-pro": 4}[l.Rule.Name()]
		if l.Remaining != want {
			t.Errorf("after the upgrade, %s (key %q): %d left, want %d", l.Rule.Name(), l.Key, l.Remaining, want)
		}
	}
	spent = 0
	for range 6 {
		if d.Decide(ctx, rs, "GET", "/v1/a", call{user: "acme//alice", plan: "pro"}).Verdict == sluice.Allowed {
			spent++
		}
	}
	if spent != 4 {
		t.Fatalf("alice on pro spent %d more, want the 4 left of her 8", spent)
	}
}

// Against a model of budgets counted within tenants: a random run of
// callers of random organisations, teams and users, some without an
// organisation or a team, is allowed exactly when every level's budget,
// keyed as the groups' comment says, has room, and a denied request
// spends nothing; every record holds what the model spent.
func TestGroupNestingMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		e := newTestEngine(t)
		d := newTestDoor(t, e, func(c *sluice.DoorConfig[call]) { c.Key = tenantKey })
		limits := []int64{rapid.Int64Range(1, 6).Draw(rt, "org"), rapid.Int64Range(1, 4).Draw(rt, "team"), rapid.Int64Range(1, 3).Draw(rt, "user")}
		rs := mustRuleset(t, []sluice.Rule{
			month("org", "tree", sluice.ScopeAttr("org"), limits[0]),
			month("team", "tree", sluice.ScopeAttr("team"), limits[1]),
			month("user", "tree", sluice.ScopeUser, limits[2]),
		}, nil, "")
		rules := rs.Rules()
		spent := map[[2]string]int64{} // (rule, key as stored) → spent
		keysOf := func(org, team, user string) [3]string {
			own := [3]string{"attr:" + org, "attr:" + team, "user:" + user}
			for i, v := range []string{org, team, user} {
				if v == "" {
					own[i] = "ip:192.0.2.1"
				}
			}
			tenant, level := "", 0
			switch {
			case org != "":
				tenant, level = own[0], 0
			case team != "":
				tenant, level = own[1], 1
			default:
				return own
			}
			for i := level + 1; i < 3; i++ {
				own[i] = sluice.NestedKey(tenant, own[i])
			}
			return own
		}
		names := []string{"org", "team", "user"}
		ctx := context.Background()
		for i := range rapid.IntRange(1, 60).Draw(rt, "requests") {
			org := rapid.SampledFrom([]string{"", "acme", "globex"}).Draw(rt, "org")
			team := rapid.SampledFrom([]string{"", "red", "blue"}).Draw(rt, "team")
			user := rapid.SampledFrom([]string{"alice", "bob"}).Draw(rt, "user")
			keys := keysOf(org, team, user)
			want := true
			for j, k := range keys {
				want = want && spent[[2]string{names[j], k}] < limits[j]
			}
			out := d.Decide(ctx, rs, "GET", "/v1/a", call{user: org + "/" + team + "/" + user})
			if got := out.Verdict == sluice.Allowed; got != want {
				rt.Fatalf("request %d (%s/%s/%s): %v, want allowed %v", i, org, team, user, out.Verdict, want)
			}
			if want {
				for j, k := range keys {
					spent[[2]string{names[j], k}]++
				}
			}
		}
		for rk, n := range spent {
			for _, c := range rules {
				if c.Name() != rk[0] {
					continue
				}
				st, err := sluice.PeekState(ctx, e, c.Limit(), rk[1], 1)
				if err != nil || st.Remaining != c.Rule().Limit-n {
					rt.Fatalf("%s %q: %d left, %v; want %d", rk[0], rk[1], st.Remaining, err, c.Rule().Limit-n)
				}
			}
		}
	})
}

// A path parameter is no tenant: the client chooses the path, and would
// multiply its budget by naming other organisations in it. So alice's
// budget under /v1/orgs/{org}/ is hers whatever org she names; a global
// level keeps its one key.
func TestGroupParamIsNoTenant(t *testing.T) {
	e := newTestEngine(t)
	d := newTestDoor(t, e, func(c *sluice.DoorConfig[call]) { c.Key = tenantKey })
	pattern := func(name string, scope sluice.Scope, limit int64) sluice.Rule {
		r := month(name, "tree", scope, limit)
		r.PathPrefix, r.Path = "", "/v1/orgs/{org}/items"
		return r
	}
	rs := mustRuleset(t, []sluice.Rule{
		pattern("all", sluice.ScopeGlobal, 100), pattern("org", sluice.ScopeParam("org"), 10), pattern("user", sluice.ScopeUser, 2),
	}, nil, "")
	ctx := context.Background()
	allowed := 0
	for _, org := range []string{"acme", "globex", "initech"} {
		if d.Decide(ctx, rs, "GET", "/v1/orgs/"+org+"/items", call{user: "//alice"}).Verdict == sluice.Allowed {
			allowed++
		}
	}
	if allowed != 2 {
		t.Fatalf("alice naming three organisations in the path: %d allowed, want her 2", allowed)
	}
	u, err := d.Usage(ctx, rs, "GET", "/v1/orgs/acme/items", call{user: "//alice"})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range u.Limits {
		if want := map[string]string{"all": "global", "org": "param:acme", "user": "user:alice"}[l.Rule.Name()]; l.Key != want {
			t.Errorf("%s: key %q, want %q", l.Rule.Name(), l.Key, want)
		}
	}
}

// Rules sharing a counter are of one group, or of none: a group's level
// may count within its tenant, and a rule outside it would count the same
// callers under other keys.
func TestGroupCounterSharedAcrossGroupsRefused(t *testing.T) {
	a, b := month("a", "tree", sluice.ScopeUser, 2), month("b", "", sluice.ScopeUser, 2)
	a.Counter, b.Counter, b.PathPrefix = "c", "c", "/v2/"
	_, err := sluice.NewRuleset([]sluice.Rule{a, b}, nil, "")
	var re *sluice.RuleError
	if !errors.As(err, &re) || re.Field != "counter" || !strings.Contains(re.Reason, "of group") {
		t.Fatalf("a counter shared by a group's rule and one of no group: %v, want refused", err)
	}
}

// An override names a caller's own key and holds within every tenant; a
// key within a tenant is refused as an override's.
func TestGroupOverrideHoldsWithinEveryTenant(t *testing.T) {
	d := newTestDoor(t, newTestEngine(t), func(c *sluice.DoorConfig[call]) { c.Key = tenantKey })
	rs := mustRuleset(t, []sluice.Rule{month("org", "tree", sluice.ScopeAttr("org"), 100), month("user", "tree", sluice.ScopeUser, 1)}, nil, "")
	if _, err := rs.WithOverrides([]sluice.Override{{Rule: "user", Key: sluice.NestedKey("attr:acme", "user:alice"), Limit: 3}}); err == nil || !strings.Contains(err.Error(), "own key") {
		t.Fatalf("an override of a key within a tenant: %v, want refused", err)
	}
	rs, err := rs.WithOverrides([]sluice.Override{{Rule: "user", Key: "user:alice", Limit: 3}})
	if err != nil {
		t.Fatal(err)
	}
	for _, org := range []string{"acme", "globex"} {
		n := 0
		for range 5 {
			if d.Decide(context.Background(), rs, "GET", "/v1/a", call{user: org + "//alice"}).Verdict == sluice.Allowed {
				n++
			}
		}
		if n != 3 {
			t.Errorf("alice of %s: %d allowed, want her override's 3", org, n)
		}
	}
}
