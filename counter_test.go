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

// counterRule is a fixed window rule of limit per hour for plan, counting
// in counter.
func counterRule(name, plan, counter string, limit int64) sluice.Rule {
	return sluice.Rule{Name: name, Plan: plan, Counter: counter, PathPrefix: "/v1/", Scope: sluice.ScopeUser,
		Algorithm: algo.FixedWindowName, Limit: limit, Window: time.Hour}
}

// A caller moved to another plan mid-window keeps what it spent when the
// plans' rules share a counter, and starts afresh when they do not.
func TestCounterCarriesSpentAcrossPlans(t *testing.T) {
	for _, tt := range []struct {
		counter string
		want    int64 // remaining after the first request on pro
	}{
		{"api-hour", 100 - 8 - 1},
		{"", 100 - 1},
	} {
		d := newTestDoor(t, newTestEngine(t), nil)
		rs := mustRuleset(t, []sluice.Rule{
			counterRule("free-hour", "free", tt.counter, 10),
			counterRule("pro-hour", "pro", tt.counter, 100),
		}, nil, "")
		ctx := context.Background()
		for range 8 {
			if out := d.Decide(ctx, rs, "GET", "/v1/a", call{user: "alice", plan: "free"}); out.Verdict != sluice.Allowed {
				t.Fatalf("counter %q: free request %v", tt.counter, out.Verdict)
			}
		}
		out := d.Decide(ctx, rs, "GET", "/v1/a", call{user: "alice", plan: "pro"})
		if out.Verdict != sluice.Allowed || out.Rule.Name() != "pro-hour" || out.Decision.Remaining != tt.want {
			t.Fatalf("counter %q: upgraded: %v under %v, remaining %d, want %d", tt.counter, out.Verdict, out.Rule, out.Decision.Remaining, tt.want)
		}
		if tt.counter == "" {
			continue
		}
		// Moved back down, the caller has spent 9 of free's 10.
		if out := d.Decide(ctx, rs, "GET", "/v1/a", call{user: "alice", plan: "free"}); out.Verdict != sluice.Allowed || out.Decision.Remaining != 0 {
			t.Fatalf("downgraded: %v remaining %d, want the last of 10", out.Verdict, out.Decision.Remaining)
		}
		if out := d.Decide(ctx, rs, "GET", "/v1/a", call{user: "alice", plan: "free"}); out.Verdict != sluice.Denied {
			t.Fatalf("downgraded past the limit: %v", out.Verdict)
		}
	}
}

// Rules share a counter only with the same window algorithm, window and
// scope.
func TestCounterRefused(t *testing.T) {
	bucket := counterRule("b", "pro", "c", 100)
	bucket.Algorithm = algo.TokenBucketName
	ip := counterRule("b", "pro", "c", 100)
	ip.Scope = sluice.ScopeIP
	day := counterRule("b", "pro", "c", 100)
	day.Window = 24 * time.Hour
	bad := counterRule("b", "pro", "c d", 100)
	for _, tt := range []struct {
		b    sluice.Rule
		want string
	}{
		{bucket, "whose algorithm is fixed_window, not token_bucket"},
		{ip, "scoped user, not ip"},
		{day, "whose window is 1h0m0s, not 24h0m0s"},
		{bad, "want a counter name"},
	} {
		_, err := sluice.NewRuleset([]sluice.Rule{counterRule("a", "free", "c", 10), tt.b}, nil, "")
		var re *sluice.RuleError
		if !errors.As(err, &re) || re.Rule != "b" || re.Field != "counter" || !strings.Contains(re.Reason, tt.want) {
			t.Errorf("%+v: %v, want a RuleError on counter saying %q", tt.b, err, tt.want)
		}
	}
	// Naming another rule's name as the counter shares that rule's.
	if _, err := sluice.NewRuleset([]sluice.Rule{counterRule("a", "free", "", 10), counterRule("b", "pro", "a", 100)}, nil, ""); err != nil {
		t.Fatal(err)
	}
}
