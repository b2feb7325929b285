package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/config"
)

const settleRules = `
rules:
  - name: tokens
    method: POST
    path_prefix: /v1/
    scope: api_key
    algorithm: sliding_counter
    limit: 10000
    window: 1m
    cost: 256
    settle:
      estimate_field: max_tokens
      estimate_add: 512
      max_body: 2097152
      actual_field: usage.total_tokens
`

// A rule's settle section becomes its sluice.Settle.
func TestParseSettle(t *testing.T) {
	c, err := config.Parse("settle.yaml", []byte(settleRules))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Rules[0].Settle
	if s == nil || s.EstimateField != "max_tokens" || s.EstimateAdd != 512 || s.MaxBody != 2<<20 || s.ActualField != "usage.total_tokens" {
		t.Fatalf("settle = %+v", s)
	}
	if _, err := c.Ruleset(); err != nil {
		t.Fatal(err)
	}
}

// A wrong settle section fails at load, naming the rule, the field and
// its line.
func TestParseSettleErrors(t *testing.T) {
	for _, tc := range []struct {
		name, from, to, field, line string
	}{
		{"two actuals", "      actual_field: usage.total_tokens", "      actual_field: usage.total_tokens\n      actual_header: X-Tokens", "rules[0].settle", ":12"},
		{"negative add", "estimate_add: 512", "estimate_add: -1", "rules[0].settle.estimate_add", ":13"},
		{"zero max_body", "max_body: 2097152", "max_body: 0", "rules[0].settle.max_body", ":14"},
		{"bad path", "actual_field: usage.total_tokens", "actual_field: usage..total", "rules[0].settle.actual_field", ":15"},
		{"unknown key", "estimate_add: 512", "estimate_ad: 512", "rules[0].settle.estimate_ad", ":13"},
		{"not a map", "    settle:\n      estimate_field: max_tokens\n      estimate_add: 512\n      max_body: 2097152\n      actual_field: usage.total_tokens", "    settle: usage", "rules[0].settle", ":11"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("settle.yaml", []byte(strings.Replace(settleRules, tc.from, tc.to, 1)))
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *config.Error", err)
			}
			if ce.Field != tc.field || !strings.Contains(err.Error(), tc.line) {
				t.Fatalf("err = %v (field %q), want field %q at line %s", err, ce.Field, tc.field, tc.line)
			}
		})
	}
}
