package config_test

import (
	"errors"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
)

// A rule's "shadow: true" makes it a shadow rule, and the default may be
// one; left out, a rule is enforced.
func TestParseShadowRules(t *testing.T) {
	c, err := config.Parse("shadow.yaml", []byte(`
rules:
  - name: orders
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: token_bucket
    limit: 5
    window: 1m
  - name: orders-tight
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: token_bucket
    limit: 2
    window: 1m
    shadow: true
  - name: search
    path_prefix: /api/search
    scope: ip
    algorithm: fixed_window
    limit: 10
    window: 1m
    shadow: false
default:
  name: catch-all
  scope: ip
  algorithm: sliding_counter
  limit: 100
  window: 1m
  shadow: true
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := []bool{c.Rules[0].Shadow, c.Rules[1].Shadow, c.Rules[2].Shadow, c.Default.Shadow}; got[0] || !got[1] || got[2] || !got[3] {
		t.Errorf("Shadow of orders, orders-tight, search, default = %v, want [false true false true]", got)
	}
	rs, err := c.Ruleset()
	if err != nil {
		t.Fatal(err)
	}
	if m, s := rs.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: "/api/orders"}), rs.AppendMatchShadow(nil, sluice.RequestShape{Method: "POST", Path: "/api/orders"}); len(m) != 1 || m[0].Name() != "orders" || len(s) != 1 || s[0].Name() != "orders-tight" {
		t.Errorf("POST /api/orders: Match %v, MatchShadow %v; want [orders] and [orders-tight]", names(m), names(s))
	}
	if m, s := rs.AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: "/"}), rs.AppendMatchShadow(nil, sluice.RequestShape{Method: "GET", Path: "/"}); len(m) != 0 || len(s) != 1 || s[0].Name() != "catch-all" {
		t.Errorf("GET /: Match %v, MatchShadow %v; want nothing and the shadow default", names(m), names(s))
	}
}

func TestBadShadowNamesTheLineAndTheField(t *testing.T) {
	rule := func(name, extra string) string {
		return "  - name: " + name + "\n    path_prefix: /api\n    scope: user\n    algorithm: gcra\n    limit: 5\n    window: 1m\n" + extra
	}
	tests := []struct {
		name, config, want string
	}{
		{"not a boolean", "rules:\n" + rule("a", "    shadow: yes please\n"),
			`x.yaml:8: rules[0].shadow: want true or false, got "yes please"`},
		{"a string", "rules:\n" + rule("a", "    shadow: \"true\"\n"),
			`x.yaml:8: rules[0].shadow: want true or false, got "true"`},
		{"two shadow rules on one route", "rules:\n" + rule("a", "    shadow: true\n") + rule("b", "    shadow: true\n"),
			`x.yaml:10: rules[1].path_prefix: rule "b": shadow rule "a" has the same method and path prefix and always wins in most_specific mode`},
	}
	for _, tt := range tests {
		_, err := config.Parse("x.yaml", []byte(tt.config))
		if err == nil || err.Error() != tt.want || !errors.Is(err, sluice.ErrInvalidConfig) {
			t.Errorf("%s: Parse = %v, want %s", tt.name, err, tt.want)
		}
	}
	// An enforced and a shadow rule on one route are the point of shadow mode.
	if _, err := config.Parse("x.yaml", []byte("rules:\n"+rule("a", "")+rule("b", "    shadow: true\n"))); err != nil {
		t.Errorf("an enforced and a shadow rule on one route: %v, want no error", err)
	}
}
