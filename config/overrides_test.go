package config_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/identity"
)

const plansConfig = `identity:
  trusted_proxies: [10.0.0.0/8]
  ipv6_prefix: 48
  plan_header: X-Sluice-Plan
rules:
  - name: orders
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: token_bucket
    limit: 10
    window: 1m
  - name: orders-premium
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: token_bucket
    limit: 100
    window: 1m
    plan: premium
  - name: search
    path_prefix: /api/search
    scope: api_key
    algorithm: gcra
    limit: 5
    window: 1s
    burst: 2
default:
  name: catch-all
  scope: ip
  algorithm: sliding_counter
  limit: 50
  window: 1m
overrides:
  - rule: orders
    caller: user:alice
    limit: 40
  - rule: search
    caller: key:sk_live_secret
    limit: 50
    window: 1m
    burst: 20
  - rule: catch-all
    caller: ip:2001:db8:aa:bb::1
    limit: 500
`

func TestParsePlansAndOverrides(t *testing.T) {
	c, err := config.Parse("p.yaml", []byte(plansConfig))
	if err != nil {
		t.Fatal(err)
	}
	if c.Identity.PlanHeader != "X-Sluice-Plan" {
		t.Errorf("plan_header = %q", c.Identity.PlanHeader)
	}
	if c.Rules[1].Plan != "premium" || c.Rules[0].Plan != "" {
		t.Errorf("plans = %q, %q; want none, premium", c.Rules[0].Plan, c.Rules[1].Plan)
	}
	id, err := identity.New(c.Identity)
	if err != nil {
		t.Fatal(err)
	}
	// The keys are the doors' keys: the API key hashed, the IPv6 address
	// grouped by the file's /48.
	apiKey, _ := id.Key(sluice.ScopeAPIKey, "203.0.113.1:1", http.Header{"X-Api-Key": {"sk_live_secret"}})
	ipKey, _ := id.Key(sluice.ScopeIP, "[2001:db8:aa:ffff::9]:1", nil)
	want := []sluice.Override{
		{Rule: "orders", Key: "user:alice", Limit: 40},
		{Rule: "search", Key: apiKey, Limit: 50, Window: time.Minute, Burst: 20},
		{Rule: "catch-all", Key: ipKey, Limit: 500},
	}
	if fmt.Sprint(c.Overrides) != fmt.Sprint(want) {
		t.Errorf("Overrides =\n%+v\nwant\n%+v", c.Overrides, want)
	}
	if strings.Contains(fmt.Sprint(c.Overrides), "sk_live") {
		t.Errorf("the parsed overrides hold the raw API key: %+v", c.Overrides)
	}
	rs, err := c.Ruleset()
	if err != nil {
		t.Fatal(err)
	}
	orders := rs.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: "/api/orders"})[0]
	if got := rs.Override(orders, "user:alice").Rule().Limit; got != 40 {
		t.Errorf("alice's orders limit = %d, want 40", got)
	}
	if got := rs.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: "/api/orders", Plan: "premium"})[0].Name(); got != "orders-premium" {
		t.Errorf("a premium order matches %s, want orders-premium", got)
	}
	// A Config built by hand compiles its overrides too.
	byHand := config.Config{Rules: c.Rules, Default: c.Default, Overrides: c.Overrides}
	rs2, err := byHand.Ruleset()
	if err != nil {
		t.Fatal(err)
	}
	if got := rs2.Override(rs2.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: "/api/orders"})[0], "user:alice").Rule().Limit; got != 40 {
		t.Errorf("by hand: alice's orders limit = %d, want 40", got)
	}
}

func TestPlansAndOverridesErrors(t *testing.T) {
	edit := func(old, new string) string {
		if !strings.Contains(plansConfig, old) {
			t.Fatalf("%q not in the config", old)
		}
		return strings.Replace(plansConfig, old, new, 1)
	}
	for _, tt := range []struct {
		name, data, want string
	}{
		{"a bad plan name", edit("plan: premium", "plan: pre/mium"), `p.yaml:20: rules[1].plan: rule "orders-premium": want a plan name`},
		{"an empty plan", edit("plan: premium", `plan: ""`), "p.yaml:20: rules[1].plan: must not be empty"},
		{"a plan on the default", edit("  name: catch-all\n", "  name: catch-all\n  plan: premium\n"), `p.yaml:30: default.plan: rule "catch-all": not allowed on the default`},
		{"a bad plan header", edit("plan_header: X-Sluice-Plan", "plan_header: X Plan"), "p.yaml:4: identity.plan_header: want an HTTP header name"},
		{"an unknown rule", edit("rule: orders\n", "rule: order\n"), `p.yaml:35: overrides[0].rule: rule "order", caller user:alice: no rule or default is named "order"`},
		{"a bad caller", edit("caller: user:alice", "caller: alice"), "p.yaml:36: overrides[0].caller: sluice/identity: bad caller key: want user:ID"},
		{"a caller of another scope", edit("caller: user:alice", "caller: key:abc"), "p.yaml:36: overrides[0].caller: rule \"orders\", caller an API key (key:"},
		{"a zero limit", edit("limit: 40", "limit: 0"), "p.yaml:37: overrides[0].limit: must be positive, got 0"},
		{"a zero window", edit("window: 1m\n    burst: 20", "window: 0s\n    burst: 20"), "p.yaml:41: overrides[1].window: must be positive"},
		{"a capacity under the cost", edit("limit: 40", "limit: 40\n    burst: 1\n  - rule: search\n    caller: key:other\n    burst: 1"), ""},
		{"no caller", edit("    caller: user:alice\n", ""), "p.yaml:35: overrides[0].caller: required"},
		{"an unknown key", edit("limit: 40", "limit: 40\n    algorithm: gcra"), "p.yaml:38: overrides[0].algorithm: unknown key"},
		{"one caller twice", edit("limit: 40", "limit: 40\n  - rule: orders\n    caller: user:alice\n    limit: 41"), "p.yaml:39: overrides[1].caller: rule \"orders\", caller user:alice: overrides[0] gives this caller"},
		{"not a list", strings.SplitAfter(plansConfig, "overrides:")[0] + " {}\n", "overrides: want a list of overrides"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("p.yaml", []byte(tt.data))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Parse: %v, want nil", err)
				}
				return
			}
			var ce *config.Error
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse: %v, want a *config.Error containing %q", err, tt.want)
			}
			if !errors.Is(err, sluice.ErrInvalidConfig) {
				t.Errorf("%v does not match ErrInvalidConfig", err)
			}
			if strings.Contains(err.Error(), "sk_live") {
				t.Errorf("the error shows an API key: %v", err)
			}
		})
	}
	// The rule's cost counts against the caller's own capacity.
	costly := edit("    limit: 10\n    window: 1m\n", "    limit: 10\n    window: 1m\n    cost: 5\n")
	_, err := config.Parse("p.yaml", []byte(strings.Replace(costly, "limit: 40", "limit: 4", 1)))
	if err == nil || !strings.Contains(err.Error(), "overrides[0].cost") {
		t.Errorf("an override's capacity under the rule's cost: %v, want an error on overrides[0].cost", err)
	}
}

// FuzzParseOverrides fuzzes the plan and overrides keys: whatever the
// values, Parse returns a *config.Error or a config whose overrides are
// in force in its ruleset and whose keys are the doors' keys.
func FuzzParseOverrides(f *testing.F) {
	f.Add("premium", "user:alice", "40", "1m", "X-Sluice-Plan")
	f.Add("p", "key:sk", "1", "1s", "X")
	f.Add("", "ip:2001:db8::1", "-1", "0s", "")
	f.Add("a b", "keyhash:0123456789abcdef0123456789abcdef", "9223372036854775807", "1h", "X Y")
	f.Fuzz(func(t *testing.T, plan, caller, limit, window, header string) {
		q := func(s string) string { return fmt.Sprintf("%q", s) }
		data := "identity:\n  plan_header: " + q(header) + "\nrules:\n" +
			"  - {name: a, path_prefix: /a, scope: user, algorithm: token_bucket, limit: 10, window: 1m, plan: " + q(plan) + "}\n" +
			"  - {name: b, path_prefix: /b, scope: ip, algorithm: gcra, limit: 10, window: 1m}\n" +
			"overrides:\n  - {rule: a, caller: " + q(caller) + ", limit: " + limit + ", window: " + q(window) + "}\n" +
			"  - {rule: b, caller: " + q(caller) + ", burst: " + limit + "}\n"
		c, err := config.Parse("fuzz.yaml", []byte(data))
		if err != nil {
			var ce *config.Error
			if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error %T %q, want a *config.Error naming the file", err, err)
			}
			return
		}
		rs, err := c.Ruleset()
		if err != nil {
			t.Fatal(err)
		}
		id, err := identity.New(c.Identity)
		if err != nil {
			t.Fatalf("a parsed identity section: %v", err)
		}
		for _, o := range c.Overrides {
			if k, err := id.ParseKey(o.Key); err != nil && !strings.HasPrefix(o.Key, "key:") || err == nil && k != o.Key && !strings.HasPrefix(o.Key, "key:") {
				t.Fatalf("override key %q is not a caller key (%q, %v)", o.Key, k, err)
			}
			c := rs.Rule(o.Rule)
			if got := rs.Override(c, o.Key); got == c {
				t.Fatalf("override %+v not in force", o)
			}
		}
	})
}
