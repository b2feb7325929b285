package sluice_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/sluice-go/sluice"
)

func shadow(r sluice.Rule) sluice.Rule {
	r.Shadow = true
	return r
}

// A shadow rule is matched apart from the enforced ones: the enforced rule
// a request gets is the one it would get without any shadow rule, and the
// shadow rule it gets is chosen among shadow rules alone.
func TestShadowRulesNeverChangeTheEnforcedMatch(t *testing.T) {
	enforced := []sluice.Rule{rule("api", "*", "/api"), rule("orders-write", "POST", "/api/orders")}
	shadows := []sluice.Rule{
		shadow(rule("orders-write-tight", "POST", "/api/orders")), // same route as an enforced rule
		shadow(rule("items-trial", "*", "/api/orders/items")),     // more specific than every enforced rule
		shadow(rule("api-trial", "*", "/api")),
	}
	tests := []struct {
		mode           sluice.MatchMode
		method, path   string
		want, wantShad []string
	}{
		{sluice.MatchMostSpecific, "POST", "/api/orders/items/1", []string{"orders-write"}, []string{"items-trial"}},
		{sluice.MatchMostSpecific, "POST", "/api/orders/1", []string{"orders-write"}, []string{"orders-write-tight"}},
		{sluice.MatchMostSpecific, "GET", "/api/orders", []string{"api"}, []string{"api-trial"}},
		{sluice.MatchMostSpecific, "GET", "/health", []string{}, []string{}},
		{sluice.MatchAll, "POST", "/api/orders/items/1", []string{"orders-write", "api"}, []string{"items-trial", "orders-write-tight", "api-trial"}},
		{sluice.MatchAll, "GET", "/api/x", []string{"api"}, []string{"api-trial"}},
	}
	for _, tt := range tests {
		rs := mustRuleset(t, append(slices.Clone(enforced), shadows...), nil, tt.mode)
		without := mustRuleset(t, enforced, nil, tt.mode)
		if got, alone := names(rs.AppendMatch(nil, sluice.RequestShape{Method: tt.method, Path: tt.path})), names(without.AppendMatch(nil, sluice.RequestShape{Method: tt.method, Path: tt.path})); !slices.Equal(got, tt.want) || !slices.Equal(alone, tt.want) {
			t.Errorf("%s: Match(%s, %s) = %v (%v without the shadow rules), want %v", tt.mode, tt.method, tt.path, got, alone, tt.want)
		}
		if got := names(rs.AppendMatch(nil, sluice.RequestShape{Method: tt.method, Path: tt.path})); !slices.Equal(got, tt.want) {
			t.Errorf("%s: AppendMatch(%s, %s) = %v, want %v", tt.mode, tt.method, tt.path, got, tt.want)
		}
		if got := names(rs.AppendMatchShadow(nil, sluice.RequestShape{Method: tt.method, Path: tt.path})); !slices.Equal(got, tt.wantShad) {
			t.Errorf("%s: MatchShadow(%s, %s) = %v, want %v", tt.mode, tt.method, tt.path, got, tt.wantShad)
		}
		if got := names(rs.AppendMatchShadow(nil, sluice.RequestShape{Method: tt.method, Path: tt.path})); !slices.Equal(got, tt.wantShad) {
			t.Errorf("%s: AppendMatchShadow(%s, %s) = %v, want %v", tt.mode, tt.method, tt.path, got, tt.wantShad)
		}
		if !sluice.HasShadow(rs) || sluice.HasShadow(without) {
			t.Errorf("%s: HasShadow = %t and %t without shadow rules, want true and false", tt.mode, sluice.HasShadow(rs), sluice.HasShadow(without))
		}
		for _, c := range rs.Rules() {
			if want := slices.ContainsFunc(shadows, func(r sluice.Rule) bool { return r.Name == c.Name() }); c.Shadow() != want || c.Rule().Shadow != want {
				t.Errorf("%s: rule %s: Shadow() = %t, want %t", tt.mode, c.Name(), c.Shadow(), want)
			}
		}
		if got := len(rs.Rules()); got != len(enforced)+len(shadows) {
			t.Errorf("%s: Rules() has %d rules, want %d: the shadow ones are listed too", tt.mode, got, len(enforced)+len(shadows))
		}
	}
}

// An enforced default covers what no enforced rule covers, shadow rules
// notwithstanding; a shadow default covers only what no rule at all covers.
func TestShadowDefault(t *testing.T) {
	rules := []sluice.Rule{rule("api", "*", "/api"), shadow(rule("admin-trial", "*", "/admin"))}
	def := rule("catch-all", "", "")
	shadowDef := shadow(def)
	tests := []struct {
		def            *sluice.Rule
		path           string
		want, wantShad []string
	}{
		{&def, "/admin/x", []string{"catch-all"}, []string{"admin-trial"}},
		{&def, "/health", []string{"catch-all"}, []string{}},
		{&def, "/api/x", []string{"api"}, []string{}},
		{&shadowDef, "/admin/x", []string{}, []string{"admin-trial"}},
		{&shadowDef, "/health", []string{}, []string{"catch-all"}},
		{&shadowDef, "/api/x", []string{"api"}, []string{}},
	}
	for _, mode := range []sluice.MatchMode{sluice.MatchMostSpecific, sluice.MatchAll} {
		for _, tt := range tests {
			rs := mustRuleset(t, rules, tt.def, mode)
			if got := names(rs.AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: tt.path})); !slices.Equal(got, tt.want) {
				t.Errorf("%s, shadow default %t: Match(%s) = %v, want %v", mode, tt.def.Shadow, tt.path, got, tt.want)
			}
			if got := names(rs.AppendMatchShadow(nil, sluice.RequestShape{Method: "GET", Path: tt.path})); !slices.Equal(got, tt.wantShad) {
				t.Errorf("%s, shadow default %t: MatchShadow(%s) = %v, want %v", mode, tt.def.Shadow, tt.path, got, tt.wantShad)
			}
		}
	}
	if rs := mustRuleset(t, nil, &shadowDef, ""); !sluice.HasShadow(rs) || !rs.Default().Shadow() {
		t.Errorf("a ruleset whose only shadow rule is the default: HasShadow %t, Default().Shadow() %t; want true, true", sluice.HasShadow(rs), rs.Default().Shadow())
	}
}

// In most_specific mode two rules of one kind on one route are refused,
// as before; an enforced and a shadow rule on one route are not.
func TestShadowRuleMayRepeatAnEnforcedRoute(t *testing.T) {
	a := rule("orders", "POST", "/api/orders")
	if _, err := sluice.NewRuleset([]sluice.Rule{a, shadow(rule("orders-tight", "POST", "/api/orders"))}, nil, sluice.MatchMostSpecific); err != nil {
		t.Errorf("an enforced and a shadow rule on one route: %v, want no error", err)
	}
	_, err := sluice.NewRuleset([]sluice.Rule{shadow(a), shadow(rule("orders-tight", "POST", "/api/orders"))}, nil, sluice.MatchMostSpecific)
	var re *sluice.RuleError
	if !errors.As(err, &re) || re.Rule != "orders-tight" || re.Field != "path_prefix" || re.Index != 1 {
		t.Errorf("two shadow rules on one route: %v, want a path_prefix error on orders-tight (index 1)", err)
	}
	_, err = sluice.NewRuleset([]sluice.Rule{a, shadow(rule("orders", "GET", "/x"))}, nil, sluice.MatchAll)
	if !errors.As(err, &re) || re.Field != "name" {
		t.Errorf("a shadow rule named like an enforced one: %v, want a name error (they would share counters)", err)
	}
}

// A Registry holding a ruleset without shadow rules answers MatchShadow
// with nothing, as does the empty ruleset.
func TestRegistryMatchShadow(t *testing.T) {
	reg := sluice.NewRegistry(nil)
	if got := reg.Ruleset().AppendMatchShadow(nil, sluice.RequestShape{Method: "GET", Path: "/"}); len(got) != 0 || sluice.HasShadow(reg.Ruleset()) {
		t.Errorf("empty registry: MatchShadow = %v, HasShadow %t; want nothing", names(got), sluice.HasShadow(reg.Ruleset()))
	}
	reg.Swap(mustRuleset(t, []sluice.Rule{shadow(rule("trial", "*", "/"))}, nil, ""))
	if got := names(reg.Ruleset().AppendMatchShadow(nil, sluice.RequestShape{Method: "GET", Path: "/x"})); !slices.Equal(got, []string{"trial"}) {
		t.Errorf("after a swap: MatchShadow = %v, want [trial]", got)
	}
	if got := reg.Ruleset().AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: "/x"}); len(got) != 0 {
		t.Errorf("after a swap: Match = %v, want nothing (the only rule is a shadow rule)", names(got))
	}
}
