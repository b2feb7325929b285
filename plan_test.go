package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
)

func planRule(name, method, prefix, plan string) sluice.Rule {
	r := rule(name, method, prefix)
	r.Plan = plan
	return r
}

// The plan rules of the package doc, one request at a time.
func TestMatchPlan(t *testing.T) {
	rules := []sluice.Rule{
		planRule("orders-free", "POST", "/api/orders", ""),
		planRule("orders-premium", "POST", "/api/orders", "premium"),
		planRule("api-free", "*", "/api", ""),
		planRule("api-premium", "*", "/api", "premium"),
		planRule("search-free", "GET", "/api/search", ""),
		planRule("reports-premium", "*", "/api/reports", "premium"),
		planRule("catch-all-premium", "*", "/", "premium"),
	}
	def := rule("catch-all", "", "")
	rs := mustRuleset(t, rules, &def, "")
	if !sluice.HasPlans(rs) || fmt.Sprint(sluice.Plans(rs)) != "[premium]" {
		t.Fatalf("HasPlans %v Plans %v, want true [premium]", sluice.HasPlans(rs), sluice.Plans(rs))
	}
	for _, tt := range []struct {
		plan, method, path, want string
	}{
		// A plan's rule replaces the plan-less one of the same match.
		{"", "POST", "/api/orders", "orders-free"},
		{"premium", "POST", "/api/orders", "orders-premium"},
		{"", "GET", "/api/x", "api-free"},
		{"premium", "GET", "/api/x", "api-premium"},
		// The most specific rule still wins: no premium rule for
		// /api/search, so premium callers get the plan-less one, not
		// the less specific api-premium.
		{"premium", "GET", "/api/search", "search-free"},
		// A plan-only route: premium callers get their rule, everyone
		// else what covers it without it.
		{"premium", "GET", "/api/reports/1", "reports-premium"},
		{"", "GET", "/api/reports/1", "api-free"},
		// A plan's catch-all wins over the default for its callers only.
		{"premium", "GET", "/other", "catch-all-premium"},
		{"", "GET", "/other", "catch-all"},
		// A plan no rule names is no plan.
		{"gold", "POST", "/api/orders", "orders-free"},
		{"gold", "GET", "/other", "catch-all"},
	} {
		got := names(rs.AppendMatch(nil, sluice.RequestShape{Method: tt.method, Path: tt.path, Plan: tt.plan}))
		if fmt.Sprint(got) != fmt.Sprint([]string{tt.want}) {
			t.Errorf("plan %q: MatchPlan(%s %s) = %v, want [%s]", tt.plan, tt.method, tt.path, got, tt.want)
		}
		if tt.plan == "" {
			if m := names(rs.AppendMatch(nil, sluice.RequestShape{Method: tt.method, Path: tt.path})); fmt.Sprint(m) != fmt.Sprint(got) {
				t.Errorf("Match(%s %s) = %v, MatchPlan with no plan = %v, want the same", tt.method, tt.path, m, got)
			}
		}
	}
	// Rules lists every rule, plan rules too; Rule finds them.
	if n := len(rs.Rules()); n != len(rules) {
		t.Errorf("Rules() has %d rules, want %d", n, len(rules))
	}
	if c := rs.Rule("orders-premium"); c == nil || c.Rule().Plan != "premium" {
		t.Errorf("Rule(orders-premium) = %v, want the premium rule", c)
	}
}

// In all mode a plan's rule replaces the plan-less rules of the same
// method, path prefix and scope, and no other: a premium caller keeps the
// global limit everyone shares.
func TestMatchPlanAllMode(t *testing.T) {
	user := planRule("api-user", "*", "/api", "")
	global := planRule("api-global", "*", "/api", "")
	global.Scope = sluice.ScopeGlobal
	premium := planRule("api-user-premium", "*", "/api", "premium")
	orders := planRule("orders", "POST", "/api/orders", "")
	rs := mustRuleset(t, []sluice.Rule{user, global, premium, orders}, nil, sluice.MatchAll)
	for _, tt := range []struct {
		plan, method, path string
		want               []string
	}{
		{"", "POST", "/api/orders", []string{"orders", "api-user", "api-global"}},
		{"premium", "POST", "/api/orders", []string{"orders", "api-user-premium", "api-global"}},
		{"premium", "GET", "/api/x", []string{"api-user-premium", "api-global"}},
		{"", "GET", "/other", []string{}},
	} {
		if got := names(rs.AppendMatch(nil, sluice.RequestShape{Method: tt.method, Path: tt.path, Plan: tt.plan})); !slices.Equal(got, tt.want) {
			t.Errorf("plan %q: MatchPlan(%s %s) = %v, want %v", tt.plan, tt.method, tt.path, got, tt.want)
		}
	}
}

func TestPlanValidation(t *testing.T) {
	def := rule("catch-all", "", "")
	def.Plan = "premium"
	for _, tt := range []struct {
		name  string
		rules []sluice.Rule
		def   *sluice.Rule
		rule  string
		field string
	}{
		{"plan with a space", []sluice.Rule{planRule("a", "GET", "/a", "pre mium")}, nil, "a", "plan"},
		{"plan starting with a dash", []sluice.Rule{planRule("a", "GET", "/a", "-x")}, nil, "a", "plan"},
		{"plan too long", []sluice.Rule{planRule("a", "GET", "/a", string(make([]byte, 65)))}, nil, "a", "plan"},
		{"two rules of one plan and one match", []sluice.Rule{planRule("a", "GET", "/a", "p"), planRule("b", "GET", "/a", "p")}, nil, "b", "path_prefix"},
		{"a plan on the default", nil, &def, "catch-all", "plan"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sluice.NewRuleset(tt.rules, tt.def, "")
			var re *sluice.RuleError
			if !errors.As(err, &re) || re.Rule != tt.rule || re.Field != tt.field {
				t.Fatalf("NewRuleset: %v, want a RuleError on rule %q field %q", err, tt.rule, tt.field)
			}
		})
	}
	// The same match on a plan and without one is the point of plans.
	if _, err := sluice.NewRuleset([]sluice.Rule{planRule("a", "GET", "/a", ""), planRule("b", "GET", "/a", "p"), planRule("c", "GET", "/a", "q")}, nil, ""); err != nil {
		t.Errorf("one match without a plan and on two plans: %v, want nil", err)
	}
	for _, ok := range []string{"premium", "Gold", "tier-2", "v1.pro", "a_b", "9"} {
		if !sluice.ValidPlan(ok) {
			t.Errorf("ValidPlan(%q) = false, want true", ok)
		}
	}
	for _, bad := range []string{"", "_x", ".x", "a b", "a/b", "é", "a\n"} {
		if sluice.ValidPlan(bad) {
			t.Errorf("ValidPlan(%q) = true, want false", bad)
		}
	}
}

// The rule MatchPlan picks is the one the package doc defines, for any
// rules, plans and requests: a reference written from the definition, by
// brute force, agrees with it in both modes; and a Door decides a request
// under the same rules, each keyed by its scope.
func TestMatchPlanProperty(t *testing.T) {
	eng := newTestEngine(t)
	methods := []string{"GET", "POST", "*"}
	prefixes := []string{"/", "/a", "/ab", "/a/b", "/b"}
	plans := []string{"", "", "gold", "silver"}
	scopes := []sluice.Scope{sluice.ScopeUser, sluice.ScopeIP}
	rapid.Check(t, func(t *rapid.T) {
		mode := rapid.SampledFrom([]sluice.MatchMode{sluice.MatchMostSpecific, sluice.MatchAll}).Draw(t, "mode")
		n := rapid.IntRange(0, 10).Draw(t, "rules")
		var rules []sluice.Rule
		for i := range n {
			r := planRule(fmt.Sprintf("r%d", i), rapid.SampledFrom(methods).Draw(t, "method"),
				rapid.SampledFrom(prefixes).Draw(t, "prefix"), rapid.SampledFrom(plans).Draw(t, "plan"))
			r.Scope = rapid.SampledFrom(scopes).Draw(t, "scope")
			if mode == sluice.MatchMostSpecific && slices.ContainsFunc(rules, func(o sluice.Rule) bool {
				return o.Method == r.Method && o.PathPrefix == r.PathPrefix && o.Plan == r.Plan
			}) {
				continue // refused, as TestPlanValidation checks
			}
			rules = append(rules, r)
		}
		var def *sluice.Rule
		if rapid.Bool().Draw(t, "default") {
			d := rule("default", "", "")
			def = &d
		}
		rs, err := sluice.NewRuleset(rules, def, mode)
		if err != nil {
			t.Fatalf("NewRuleset: %v", err)
		}
		method := rapid.SampledFrom([]string{"GET", "POST", "PUT"}).Draw(t, "request method")
		path := rapid.SampledFrom([]string{"/", "/a", "/ab", "/abc", "/a/b/c", "/b", "/c"}).Draw(t, "path")
		plan := rapid.SampledFrom([]string{"", "gold", "silver", "bronze"}).Draw(t, "caller plan")

		want := referenceMatch(rules, def, mode, method, path, plan)
		got := names(rs.AppendMatch(nil, sluice.RequestShape{Method: method, Path: path, Plan: plan}))
		if mode == sluice.MatchAll {
			slices.Sort(got)
			slices.Sort(want)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s mode, plan %q: MatchPlan(%s %s) = %v, want %v", mode, plan, method, path, got, want)
		}
		if plan == "" {
			if m := names(rs.AppendMatch(nil, sluice.RequestShape{Method: method, Path: path})); mode == sluice.MatchMostSpecific && !slices.Equal(m, got) {
				t.Fatalf("Match = %v, MatchPlan with no plan = %v", m, got)
			}
		}
		// A Door decides under the same rules, keyed by scope.
		var rnames []string
		door, err := sluice.NewDoor(sluice.DoorConfig[string]{
			Engine: eng,
			Key:    func(_ string, c *sluice.CompiledRule) (string, int64, error) { return string(c.Scope()) + ":k", 0, nil },
			Plan:   func(plan string) (string, error) { return plan, nil },
			Tally: func(c *sluice.CompiledRule, key string, _ int64, _ bool) {
				rnames = append(rnames, c.Name())
				if key != string(c.Scope())+":k" {
					t.Fatalf("Door: key %q under a %s rule", key, c.Scope())
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		out := door.Decide(context.Background(), rs, method, path, plan)
		if mode == sluice.MatchAll {
			slices.Sort(rnames)
		}
		if !slices.Equal(rnames, got) && !(len(rnames) == 0 && len(got) == 0) {
			t.Fatalf("Door decided under %v, MatchPlan = %v", rnames, got)
		}
		if (out.Verdict == sluice.Unlimited) != (len(got) == 0) {
			t.Fatalf("Door: %v for a request MatchPlan covers with %v", out.Verdict, got)
		}
	})
}

// referenceMatch is the plan rules of the package doc, literally: the
// candidates are the caller's plan's rules and the plan-less rules none of
// them replaces; the covering candidates are all of them (all mode) or
// the most specific one (most_specific mode, where it is unique); the
// default when none covers the request.
func referenceMatch(rules []sluice.Rule, def *sluice.Rule, mode sluice.MatchMode, method, path, plan string) []string {
	replaces := func(o, r sluice.Rule) bool {
		same := o.Method == r.Method && o.PathPrefix == r.PathPrefix
		if mode == sluice.MatchAll {
			return same && o.Scope == r.Scope
		}
		return same
	}
	var covering []sluice.Rule
	for _, r := range rules {
		switch {
		case r.Plan != "" && r.Plan != plan:
			continue
		case r.Plan == "" && plan != "" && slices.ContainsFunc(rules, func(o sluice.Rule) bool { return o.Plan == plan && replaces(o, r) }):
			continue
		}
		if (r.Method == "*" || r.Method == method) && len(path) >= len(r.PathPrefix) && path[:len(r.PathPrefix)] == r.PathPrefix {
			covering = append(covering, r)
		}
	}
	if len(covering) == 0 {
		if def != nil {
			return []string{def.Name}
		}
		return []string{}
	}
	if mode == sluice.MatchAll {
		out := []string{}
		for _, r := range covering {
			out = append(out, r.Name)
		}
		return out
	}
	best := covering[0]
	for _, r := range covering[1:] {
		if len(r.PathPrefix) > len(best.PathPrefix) || len(r.PathPrefix) == len(best.PathPrefix) && r.Method != "*" && best.Method == "*" {
			best = r
		}
	}
	return []string{best.Name}
}
