package sluice_test

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

// The fields of a rule and of decisions under it, as every door sends
// them: the policy is made from the rule alone (a bucket's window is the
// time it takes to refill), RateLimit's t is the reset capped at the
// policy's window or, on a denial, the retry; every duration in seconds,
// rounded up; a denial's never below 1.
func TestFields(t *testing.T) {
	rule := func(r sluice.Rule) *sluice.CompiledRule {
		t.Helper()
		rs, err := sluice.NewRuleset([]sluice.Rule{r}, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		return rs.Rules()[0]
	}
	orders := rule(sluice.Rule{Name: "orders", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: algo.TokenBucketName, Limit: 5, Window: time.Minute})
	burst := rule(sluice.Rule{Name: "burst", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: algo.GCRAName, Limit: 2, Window: 2 * time.Second, Burst: 5})
	counter := rule(sluice.Rule{Name: "counter", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: algo.SlidingCounterName, Limit: 10, Window: time.Minute})
	for _, tt := range []struct {
		rule              *sluice.CompiledRule
		policy            string
		d                 algo.Decision
		rateLimit         string
		reset, retryAfter int64
	}{
		{orders, `"orders";q=5;w=60`, algo.Decision{Allowed: true, Limit: 5, Remaining: 3, Reset: 24 * time.Second}, `"orders";r=3;t=24`, 24, 1},
		{orders, `"orders";q=5;w=60`, algo.Decision{Limit: 5, RetryAfter: 11*time.Second + 1, Reset: 60 * time.Second}, `"orders";r=0;t=12`, 60, 12},
		{orders, `"orders";q=5;w=60`, algo.Decision{Limit: 5, RetryAfter: time.Millisecond, Reset: 1500 * time.Millisecond}, `"orders";r=0;t=1`, 2, 1},
		{orders, `"orders";q=5;w=60`, algo.Decision{Limit: 5}, `"orders";r=0;t=1`, 0, 1},
		{burst, `"burst";q=5;w=5`, algo.Decision{Allowed: true, Limit: 5, Remaining: 4, Reset: time.Second}, `"burst";r=4;t=1`, 1, 1},
		{counter, `"counter";q=10;w=60`, algo.Decision{Allowed: true, Limit: 10, Remaining: 2, Reset: 90 * time.Second}, `"counter";r=2;t=60`, 90, 1},
		{counter, `"counter";q=10;w=60`, algo.Decision{Limit: 10, RetryAfter: 90 * time.Second, Reset: 90 * time.Second}, `"counter";r=0;t=90`, 90, 90},
	} {
		if got := tt.rule.Policy(); got != tt.policy {
			t.Errorf("%s: Policy() = %s, want %s", tt.rule.Name(), got, tt.policy)
		}
		if got := string(tt.rule.AppendRateLimit([]byte("x"), tt.d)); got != "x"+tt.rateLimit {
			t.Errorf("%s: AppendRateLimit(%+v) = %s, want x%s", tt.rule.Name(), tt.d, got, tt.rateLimit)
		}
		if got := sluice.ResetSeconds(tt.d); got != tt.reset {
			t.Errorf("%s: ResetSeconds(%+v) = %d, want %d", tt.rule.Name(), tt.d, got, tt.reset)
		}
		if got := sluice.RetryAfterSeconds(tt.d); got != tt.retryAfter {
			t.Errorf("%s: RetryAfterSeconds(%+v) = %d, want %d", tt.rule.Name(), tt.d, got, tt.retryAfter)
		}
	}
}

// A rule's name is a structured field string in its fields: in quotes, '"'
// and '\' escaped, a control or a non-ASCII byte as '?'.
func TestFieldsQuoteTheName(t *testing.T) {
	rs, err := sluice.NewRuleset([]sluice.Rule{{Name: "a\"b\\c\né", PathPrefix: "/", Scope: sluice.ScopeIP, Algorithm: algo.GCRAName, Limit: 1, Window: time.Second}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	c := rs.Rules()[0]
	if got, want := c.Policy(), `"a\"b\\c???";q=1;w=1`; got != want {
		t.Errorf("Policy() = %s, want %s", got, want)
	}
	if got, want := string(c.AppendRateLimit(nil, algo.Decision{Allowed: true, Limit: 1, Remaining: 1})), `"a\"b\\c???";r=1;t=0`; got != want {
		t.Errorf("AppendRateLimit = %s, want %s", got, want)
	}
}
