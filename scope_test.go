package sluice_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

// patternRule is a token bucket rule of limit per minute on the path
// pattern p, of the given scope.
func patternRule(name, p string, scope sluice.Scope, limit int64) sluice.Rule {
	return sluice.Rule{Name: name, Path: p, Scope: scope, Algorithm: algo.TokenBucketName, Limit: limit, Window: time.Minute}
}

// Each bad scope or path is refused naming the rule and the field.
func TestScopeAndPathRefused(t *testing.T) {
	for _, tt := range []struct {
		rule        sluice.Rule
		field, want string
	}{
		{patternRule("a", "/v1/orgs/{org}", "tenant", 1), "scope", "must be one of user, api_key, ip, global, header:NAME, attr:NAME or param:NAME"},
		{patternRule("a", "/v1/orgs/{org}", "header:X Org", 1), "scope", "want a header name"},
		{patternRule("a", "/v1/orgs/{org}", "header:", 1), "scope", "want a header name"},
		{patternRule("a", "/v1/orgs/{org}", "attr:-org", 1), "scope", "want an attribute name"},
		{patternRule("a", "/v1/orgs/{org}", "param:team", 1), "scope", "param:team names no parameter of the rule's path: its path \"/v1/orgs/{org}\" has [org]"},
		{tokenRule("a", "/v1/orgs", 1), "", ""}, // placeholder, replaced below
		{patternRule("a", "/v1/orgs/{org", sluice.ScopeUser, 1), "path", "a parameter is a whole segment"},
		{patternRule("a", "/v1//orgs", sluice.ScopeUser, 1), "path", "canonical form"},
	} {
		if tt.field == "" {
			tt.rule.Scope, tt.field, tt.want = "param:org", "scope", "it has no path pattern"
		}
		err := tt.rule.Validate()
		var re *sluice.RuleError
		if !errors.As(err, &re) || re.Rule != "a" || re.Field != tt.field || !strings.Contains(re.Reason, tt.want) {
			t.Errorf("%+v: %v; want a RuleError on %s saying %q", tt.rule, err, tt.field, tt.want)
		}
	}
	both := patternRule("a", "/v1/orgs/{org}", sluice.ScopeUser, 1)
	both.PathPrefix = "/v1"
	if err := both.Validate(); err == nil || !strings.Contains(err.Error(), `rule "a": path: a rule has a path_prefix or a path pattern, not both`) {
		t.Errorf("prefix and pattern: %v", err)
	}
	dup := []sluice.Rule{patternRule("a", "/v1/{x}", sluice.ScopeUser, 1), patternRule("b", "/v1/{y}", sluice.ScopeUser, 1)}
	if _, err := sluice.NewRuleset(dup, nil, ""); err == nil || !strings.Contains(err.Error(), `rule "b": path: rule "a" has the same method and path`) {
		t.Errorf("two patterns differing in their parameters' names: %v", err)
	}
	c, err := sluice.NewRuleset([]sluice.Rule{patternRule("h", "/", "header:x-org-id", 1)}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Rule("h").Scope(); got != "header:X-Org-Id" || got.Header() != "X-Org-Id" {
		t.Errorf("header scope compiled as %q, want the canonical header:X-Org-Id", got)
	}
}

// Most specific wins across prefixes and patterns, as pattern.go says:
// literal segments beat parameters from the left, a parameter beats a
// rest or a prefix's end, a pattern's end beats a rest.
func TestPatternSpecificity(t *testing.T) {
	rules := []sluice.Rule{
		tokenRule("v1", "/v1/orgs/", 1),
		tokenRule("acme-prefix", "/v1/orgs/acme", 1),
		patternRule("orders", "/v1/orgs/{org}/orders", sluice.ScopeUser, 1),
		patternRule("globex-any", "/v1/orgs/globex/{any}", sluice.ScopeUser, 1),
		patternRule("org-rest", "/v1/orgs/{org}/{rest...}", sluice.ScopeUser, 1),
		patternRule("org-exact", "/v1/orgs/{org}/", sluice.ScopeUser, 1),
	}
	for _, mode := range []sluice.MatchMode{sluice.MatchMostSpecific, sluice.MatchAll} {
		rs := mustRuleset(t, rules, nil, mode)
		for _, tt := range []struct{ path, want string }{
			{"/v1/orgs/initech/orders", "orders org-rest v1"},
			{"/v1/orgs/globex/orders", "globex-any orders org-rest v1"},
			{"/v1/orgs/acme/orders", "acme-prefix orders org-rest v1"},
			{"/v1/orgs/initech/orders/7", "org-rest v1"},
			{"/v1/orgs/initech/", "org-exact org-rest v1"},
			{"/v1/orgs//initech/./orders", "orders org-rest v1"},
			{"/v1/orgs", ""},
		} {
			var names []string
			for _, c := range rs.AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: tt.path}) {
				names = append(names, c.Name())
			}
			want := tt.want
			if mode == sluice.MatchMostSpecific {
				want, _, _ = strings.Cut(want, " ")
			}
			if got := strings.Join(names, " "); got != want {
				t.Errorf("%s: %s matched %q, want %q", mode, tt.path, got, want)
			}
		}
	}
}

// A rule scoped param:org counts each organisation apart, whoever calls,
// and a value over MaxAttrLen is a bad identity; under a case-insensitive
// ruleset the value is the folded segment.
func TestDoorCountsByPathParameter(t *testing.T) {
	d := newTestDoor(t, newTestEngine(t), nil)
	rs := mustRuleset(t, []sluice.Rule{patternRule("org", "/v1/orgs/{org}/orders", sluice.ScopeParam("org"), 2)}, nil, "")
	ctx := context.Background()
	for i, step := range []struct {
		user, path string
		verdict    sluice.Verdict
		key        string
	}{
		{"alice", "/v1/orgs/acme/orders", sluice.Allowed, "param:acme"},
		{"bob", "/v1/orgs/acme/orders", sluice.Allowed, "param:acme"},
		{"carol", "/v1/orgs/acme/orders", sluice.Denied, "param:acme"},
		{"carol", "/v1/orgs/globex/orders", sluice.Allowed, "param:globex"},
		{"carol", "/v1/orgs/" + strings.Repeat("x", sluice.MaxAttrLen) + "/orders", sluice.Allowed, "param:" + strings.Repeat("x", sluice.MaxAttrLen)},
		{"carol", "/v1/orgs/" + strings.Repeat("x", sluice.MaxAttrLen+1) + "/orders", sluice.Unidentified, ""},
		{"carol", "/v1/orgs/acme/orders/1", sluice.Unlimited, ""},
	} {
		out := d.Decide(ctx, rs, "GET", step.path, call{user: step.user})
		if out.Verdict != step.verdict || out.Key != step.key {
			t.Fatalf("step %d (%s): %v key %q (%v), want %v key %q", i, step.path, out.Verdict, out.Key, out.Err, step.verdict, step.key)
		}
		if out.Verdict == sluice.Unidentified && !errors.Is(out.Err, sluice.ErrBadIdentity) {
			t.Fatalf("step %d: %v, want a bad identity", i, out.Err)
		}
	}
	fold, err := sluice.NewRulesetWith([]sluice.Rule{patternRule("org-folded", "/V1/orgs/{org}/orders", sluice.ScopeParam("org"), 1)}, nil, sluice.RulesetOptions{PathCase: sluice.PathCaseInsensitive})
	if err != nil {
		t.Fatal(err)
	}
	if out := d.Decide(ctx, fold, "GET", "/v1/ORGS/Acme/orders", call{user: "a"}); out.Verdict != sluice.Allowed || out.Key != "param:acme" {
		t.Fatalf("case-insensitive: %v key %q, want allowed under param:acme", out.Verdict, out.Key)
	}
}

// An override names a caller of an attribute scope by its kind; an ip:
// caller is the anonymous fallback of a header or attr rule, never of a
// param rule, whose parameter is never missing.
func TestOverrideKeysOfAttributeScopes(t *testing.T) {
	rs := mustRuleset(t, []sluice.Rule{
		patternRule("h", "/h", sluice.ScopeHeader("X-Org-Id"), 5),
		patternRule("a", "/a", sluice.ScopeAttr("org"), 5),
		patternRule("p", "/p/{org}", sluice.ScopeParam("org"), 5),
	}, nil, "")
	for _, tt := range []struct {
		rule, key string
		ok        bool
	}{
		{"h", "header:acme", true}, {"h", "ip:192.0.2.1", true}, {"h", "attr:acme", false}, {"h", "user:acme", false},
		{"a", "attr:acme", true}, {"a", "ip:192.0.2.1", true}, {"a", "param:acme", false},
		{"p", "param:acme", true}, {"p", "ip:192.0.2.1", false}, {"p", "header:acme", false},
	} {
		_, err := rs.WithOverrides([]sluice.Override{{Rule: tt.rule, Key: tt.key, Limit: 9}})
		if (err == nil) != tt.ok {
			t.Errorf("override of %s on %s: %v, want ok=%v", tt.key, tt.rule, err, tt.ok)
		}
	}
}
