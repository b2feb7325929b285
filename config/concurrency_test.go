package config_test

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice/config"
)

// TestConcurrencyRuleFields: a concurrency rule's fields are checked, and
// each error names the line, the rule and the field.
func TestConcurrencyRuleFields(t *testing.T) {
	const head = "rules:\n  - name: inflight\n    path_prefix: /v1/\n    scope: api_key\n"
	tests := []struct{ name, rule, want string }{
		{"no max_hold", "    algorithm: concurrency\n    limit: 4\n",
			`c.yaml:2: rules[0].max_hold: rule "inflight": required`},
		{"a window", "    algorithm: concurrency\n    limit: 4\n    max_hold: 30s\n    window: 1m\n",
			`c.yaml:8: rules[0].window: rule "inflight": a concurrency rule takes max_hold, the longest a request holds its slot, not a window; got 1m0s`},
		{"limit above the bound", "    algorithm: concurrency\n    limit: 1001\n    max_hold: 30s\n",
			`c.yaml:6: rules[0].limit: rule "inflight": a concurrency limit keeps one lease per slot; at most 1000, got 1001`},
		{"a cost", "    algorithm: concurrency\n    limit: 4\n    max_hold: 30s\n    cost: 2\n",
			`c.yaml:8: rules[0].cost: rule "inflight": a request of a concurrency rule takes one slot; got 2`},
		{"negative max_hold", "    algorithm: concurrency\n    limit: 4\n    max_hold: -1s\n",
			`c.yaml:7: rules[0].max_hold: must be positive, got -1s`},
		{"zero retry_after", "    algorithm: concurrency\n    limit: 4\n    max_hold: 30s\n    retry_after: 0s\n",
			`c.yaml:8: rules[0].retry_after: must be positive when given, got 0s`},
		{"max_hold on a rate rule", "    algorithm: token_bucket\n    limit: 4\n    window: 1s\n    max_hold: 30s\n",
			`c.yaml:8: rules[0].max_hold: rule "inflight": only a concurrency rule takes it, not token_bucket`},
		{"retry_after on a rate rule", "    algorithm: gcra\n    limit: 4\n    window: 1s\n    retry_after: 2s\n",
			`c.yaml:8: rules[0].retry_after: rule "inflight": only a concurrency rule takes it, not gcra`},
		{"a settle", "    algorithm: concurrency\n    limit: 4\n    max_hold: 30s\n    settle:\n      actual_header: X-Cost\n",
			`c.yaml:9: rules[0].settle: rule "inflight": a concurrency rule holds a slot, it has no cost to settle; settle on a rate rule beside it (match: all)`},
		{"a shadow", "    algorithm: concurrency\n    limit: 4\n    max_hold: 30s\n    shadow: true\n",
			`c.yaml:8: rules[0].shadow: rule "inflight": a concurrency rule cannot be a shadow rule`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("c.yaml", []byte(head+tt.rule))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error:\n got %v\nwant %s", err, tt.want)
			}
		})
	}
}

// TestConcurrencyRuleParses: a well-formed concurrency rule is a rule of
// the set, with its MaxHold and RetryAfter.
func TestConcurrencyRuleParses(t *testing.T) {
	const doc = "rules:\n  - name: inflight\n    path_prefix: /v1/\n    scope: api_key\n" +
		"    algorithm: concurrency\n    limit: 4\n    max_hold: 30s\n    retry_after: 2s\n"
	cfg, err := config.Parse("c.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Rules[0]
	if r.Algorithm != "concurrency" || r.Limit != 4 || r.MaxHold != 30*time.Second || r.RetryAfter != 2*time.Second {
		t.Fatalf("rule = %+v, want concurrency, limit 4, max_hold 30s, retry_after 2s", r)
	}
}
