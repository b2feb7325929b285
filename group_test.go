package sluice_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

// orgKey is the key function of a door whose callers are "org/team/user":
// the organisation and the team stand for attributes an identity function
// returns.
func orgKey(c call, r *sluice.CompiledRule) (string, int64, error) {
	org, rest, _ := strings.Cut(c.user, "/")
	team, user, _ := strings.Cut(rest, "/")
	switch r.Scope() {
	case sluice.ScopeAttr("org"):
		return "attr:" + org, 0, nil
	case sluice.ScopeAttr("team"):
		return "attr:" + team, 0, nil
	case sluice.ScopeGlobal:
		return "global", 0, nil
	}
	return "user:" + user, 0, nil
}

// level is a token bucket rule of limit per minute in group g.
func level(name, g string, scope sluice.Scope, limit int64) sluice.Rule {
	return sluice.Rule{Name: name, Group: g, PathPrefix: "/v1/", Scope: scope, Algorithm: algo.TokenBucketName, Limit: limit, Window: time.Minute}
}

// A hierarchy organisation → team → user is decided all or nothing: a
// request denied at one level spends nothing at the others, and the
// parent's budget is shared by its children. A rule outside the group
// applies beside it, most specific first among those outside groups.
func TestGroupDecidesAllLevels(t *testing.T) {
	d := newTestDoor(t, newTestEngine(t), func(c *sluice.DoorConfig[call]) { c.Key = orgKey })
	rules := []sluice.Rule{
		level("org", "tree", sluice.ScopeAttr("org"), 3),
		level("team", "tree", sluice.ScopeAttr("team"), 2),
		level("user", "tree", sluice.ScopeUser, 1),
		tokenRule("wide", "/", 100),
		tokenRule("orders", "/v1/orders", 100),
	}
	rs := mustRuleset(t, rules, &sluice.Rule{Name: "def", Scope: sluice.ScopeGlobal, Algorithm: algo.TokenBucketName, Limit: 100, Window: time.Minute}, "")
	var names []string
	for _, c := range rs.AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: "/v1/orders/1"}) {
		names = append(names, c.Name())
	}
	if got := strings.Join(names, " "); got != "orders org team user" {
		t.Fatalf("/v1/orders/1 matched %q, want the most specific rule outside the group and every level", got)
	}
	ctx := context.Background()
	for i, step := range []struct {
		who     string
		verdict sluice.Verdict
		rule    string
	}{
		{"acme/red/alice", sluice.Allowed, ""},
		{"acme/red/alice", sluice.Denied, "user"},  // spends nothing of red's or acme's
		{"acme/red/bob", sluice.Allowed, ""},       // red's second
		{"acme/red/carol", sluice.Denied, "team"},  // red is spent
		{"acme/blue/dave", sluice.Allowed, ""},     // acme's third
		{"acme/blue/erin", sluice.Denied, "org"},   // acme is spent, blue is not
		{"globex/green/frank", sluice.Allowed, ""}, // another organisation
	} {
		out := d.Decide(ctx, rs, "GET", "/v1/orders/1", call{user: step.who})
		if out.Verdict != step.verdict || step.rule != "" && out.Rule.Name() != step.rule {
			t.Fatalf("step %d (%s): %v under %v, want %v under %q", i, step.who, out.Verdict, out.Rule, step.verdict, step.rule)
		}
	}
	if out := d.Decide(ctx, rs, "GET", "/other", call{user: "acme/red/alice"}); out.Verdict != sluice.Allowed || out.Rule.Name() != "wide" {
		t.Fatalf("/other: %v under %v, want allowed under the rule outside the group", out.Verdict, out.Rule)
	}
	if out := d.Decide(ctx, rs, "GET", "/v1/x", call{user: "initech/ops/gina"}); out.Verdict != sluice.Allowed || out.Rule.Name() == "def" {
		t.Fatalf("/v1/x: %v under %v, want the group's, not the default", out.Verdict, out.Rule)
	}
}

// Plans and overrides apply per level: a premium organisation's level
// replaces the organisation level alone, and an override raises one team.
func TestGroupPlansAndOverridesPerLevel(t *testing.T) {
	d := newTestDoor(t, newTestEngine(t), func(c *sluice.DoorConfig[call]) { c.Key = orgKey })
	premium := level("org-premium", "tree", sluice.ScopeAttr("org"), 5)
	premium.Plan = "premium"
	rs := mustRuleset(t, []sluice.Rule{
		level("org", "tree", sluice.ScopeAttr("org"), 2),
		premium,
		level("team", "tree", sluice.ScopeAttr("team"), 3),
		level("user", "tree", sluice.ScopeUser, 4),
	}, nil, "")
	var names []string
	for _, c := range rs.AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: "/v1/a", Plan: "premium"}) {
		names = append(names, c.Name())
	}
	if got := strings.Join(names, " "); got != "org-premium team user" {
		t.Fatalf("premium caller matched %q, want the premium org level and the other levels", got)
	}
	rs, err := rs.WithOverrides([]sluice.Override{{Rule: "team", Key: "attr:red", Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allowed := 0
	for i := range 6 {
		who := "acme/red/u" + string(rune('0'+i))
		if out := d.Decide(ctx, rs, "GET", "/v1/a", call{user: who, plan: "premium"}); out.Verdict == sluice.Allowed {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("premium organisation, raised team: %d of 6 allowed, want the premium org's 5 (the team's 3 raised to 10)", allowed)
	}
}

// A group's levels are checked: listed from the widest, no two of one
// scope on the same requests, no user beside api_key, no shadow rule, no
// default in a group.
func TestGroupRefused(t *testing.T) {
	shadow := level("s", "tree", sluice.ScopeUser, 1)
	shadow.Shadow = true
	for _, tt := range []struct {
		rules       []sluice.Rule
		def         *sluice.Rule
		field, want string
	}{
		{[]sluice.Rule{level("u", "tree", sluice.ScopeUser, 1), level("o", "tree", sluice.ScopeAttr("org"), 1)}, nil, "scope", `rule "u" of group "tree", scoped user, is a narrower level than this one, scoped attr:org`},
		{[]sluice.Rule{level("u", "tree", sluice.ScopeUser, 1), level("k", "tree", sluice.ScopeAPIKey, 1)}, nil, "scope", "neither holds the other"},
		{[]sluice.Rule{level("a", "tree", sluice.ScopeUser, 1), level("b", "tree", sluice.ScopeUser, 1)}, nil, "scope", "one level is one budget"},
		{[]sluice.Rule{shadow}, nil, "group", "a shadow rule"},
		{[]sluice.Rule{level("a", "tree!", sluice.ScopeUser, 1)}, nil, "group", "want a group name"},
		{nil, &sluice.Rule{Name: "d", Group: "tree", Scope: sluice.ScopeUser, Algorithm: algo.TokenBucketName, Limit: 1, Window: time.Minute}, "group", "not allowed on the default"},
	} {
		_, err := sluice.NewRuleset(tt.rules, tt.def, "")
		var re *sluice.RuleError
		if !errors.As(err, &re) || re.Field != tt.field || !strings.Contains(re.Reason, tt.want) {
			t.Errorf("%v: %v; want a RuleError on %s saying %q", tt.rules, err, tt.field, tt.want)
		}
	}
	// Two groups, and a group beside a rule of the same path outside it,
	// are fine; so are one scope's levels on different paths.
	if _, err := sluice.NewRuleset([]sluice.Rule{
		level("a", "one", sluice.ScopeUser, 1), level("b", "two", sluice.ScopeUser, 1), tokenRule("c", "/v1/", 1),
		{Name: "d", Group: "one", PathPrefix: "/v1/orders", Scope: sluice.ScopeUser, Algorithm: algo.TokenBucketName, Limit: 1, Window: time.Minute},
	}, nil, ""); err != nil {
		t.Fatal(err)
	}
}

// Two budgets of one level, a monthly quota and a per-minute pool of the
// same organisation, are allowed when they name different counters, and a
// plan's rule naming the quota's counter replaces the quota only: a
// premium organisation keeps the pool.
func TestGroupTwoBudgetsOfOneLevel(t *testing.T) {
	org := sluice.ScopeHeader("X-Org-ID")
	month := sluice.Rule{Name: "org-month", Group: "org", PathPrefix: "/v1/", Scope: org, Algorithm: algo.FixedWindowName, Limit: 3, Calendar: "month"}
	premium := month
	premium.Name, premium.Plan, premium.Counter, premium.Limit = "org-month-premium", "premium", "org-month", 5
	minute := sluice.Rule{Name: "org-minute", Group: "org", Counter: "org-minute", PathPrefix: "/v1/", Scope: org, Algorithm: algo.SlidingCounterName, Limit: 100, Window: time.Minute}
	user := level("user-minute", "org", sluice.ScopeUser, 100)
	for _, mode := range []sluice.MatchMode{sluice.MatchMostSpecific, sluice.MatchAll} {
		rs := mustRuleset(t, []sluice.Rule{month, premium, minute, user}, nil, mode)
		for _, tt := range []struct{ plan, want string }{
			{"", "org-month org-minute user-minute"},
			{"premium", "org-month-premium org-minute user-minute"},
		} {
			got := names(rs.AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: "/v1/a", Plan: tt.plan}))
			slices.Sort(got)
			want := strings.Fields(tt.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s mode, plan %q: matched %v, want %v", mode, tt.plan, got, want)
			}
		}
	}
	// Neither naming a counter, they are one budget twice: refused.
	minute.Counter = ""
	if _, err := sluice.NewRuleset([]sluice.Rule{month, minute}, nil, ""); err == nil || !strings.Contains(err.Error(), "name their counters") {
		t.Fatalf("two levels of one scope without counters: %v, want refused naming counters", err)
	}
}
