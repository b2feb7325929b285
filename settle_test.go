package sluice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

// tokensRule is a sliding-counter rule of limit tokens a minute whose cost
// is settled after the response, its estimate the request's.
func tokensRule(name, prefix string, limit int64) sluice.Rule {
	return sluice.Rule{Name: name, PathPrefix: prefix, Scope: sluice.ScopeUser, Algorithm: algo.SlidingCounterName,
		Limit: limit, Window: time.Minute, Cost: 10, Settle: &sluice.Settle{ActualHeader: "X-Tokens"}}
}

// settleObserved records settles besides what observed does.
type settleObserved struct{ observed }

func (o *settleObserved) ObserveSettle(rule string, charged, refunded int64, stands bool) {
	o.add("settle %s charged=%d refunded=%d stands=%v", rule, charged, refunded, stands)
}

// TestDoorSettlesTheActualCost walks a tokens-per-minute rule through
// estimates and settles: a refund makes room at once, a charge past the
// limit puts the caller in debt (denied, with a RetryAfter), an unsettled
// reservation keeps its estimate, and a request rule in the same batch is
// never settled.
func TestDoorSettlesTheActualCost(t *testing.T) {
	e := newTestEngine(t)
	obs := &settleObserved{}
	estimate := int64(20)
	d := newTestDoor(t, e, func(c *sluice.DoorConfig[call]) {
		c.Metrics = obs
		c.Key = func(q call, r *sluice.CompiledRule) (string, int64, error) {
			if r.Settle() != nil {
				return "user:" + q.user, estimate, nil
			}
			return "user:" + q.user, 0, nil
		}
	})
	perMinute := sluice.Rule{Name: "requests", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: algo.SlidingCounterName, Limit: 100, Window: time.Minute}
	rs := mustRuleset(t, []sluice.Rule{tokensRule("tokens", "/v1", 100), perMinute}, nil, sluice.MatchAll)
	ctx := context.Background()
	actual := func(n int64, ok bool) func(*sluice.CompiledRule) (int64, bool) {
		return func(r *sluice.CompiledRule) (int64, bool) {
			if r.Name() != "tokens" {
				t.Errorf("actual asked of rule %s, which does not settle", r.Name())
			}
			return n, ok
		}
	}
	remaining := func(step string, want int64) {
		t.Helper()
		out := d.Decide(ctx, rs, "POST", "/v1/chat", call{user: "ann"})
		if out.Verdict != sluice.Allowed {
			t.Fatalf("%s: verdict %v, want allowed", step, out.Verdict)
		}
		if out.Rule.Name() != "tokens" {
			t.Fatalf("%s: reported rule %s, want tokens", step, out.Rule.Name())
		}
		if got := out.Decision.Remaining; got != want {
			t.Fatalf("%s: remaining %d, want %d", step, got, want)
		}
		d.Settle(ctx, &out, actual(estimate, true)) // the probe costs its estimate
	}

	// 1. Estimate 20, actual 5: 15 back at once.
	out := d.Decide(ctx, rs, "POST", "/v1/chat", call{user: "ann"})
	if out.Verdict != sluice.Allowed || out.Reserved == nil || out.Decision.Remaining != 80 {
		t.Fatalf("first: %+v", out)
	}
	d.Settle(ctx, &out, actual(5, true))
	remaining("after a refund of 15", 100-5-20)

	// 2. Unsettled: the estimate stands.
	out = d.Decide(ctx, rs, "POST", "/v1/chat", call{user: "ann"})
	d.Settle(ctx, &out, actual(0, false))
	remaining("after an unsettled reservation", 100-5-20-20-20)

	// 3. A settle a second time changes nothing: the estimate stood.
	d.Settle(ctx, &out, actual(0, true))
	out = d.Decide(ctx, rs, "POST", "/v1/chat", call{user: "bob"})
	d.Settle(ctx, &out, actual(150, true)) // bob: 150 > 100, in debt
	out = d.Decide(ctx, rs, "POST", "/v1/chat", call{user: "bob"})
	if out.Verdict != sluice.Denied || out.Decision.RetryAfter <= 0 || out.Reserved != nil {
		t.Fatalf("in debt: verdict %v retry %v reserved %v, want denied with a RetryAfter", out.Verdict, out.Decision.RetryAfter, out.Reserved)
	}
	d.Settle(ctx, &out, actual(1, true)) // a denial has nothing to settle

	// The request rule spent 1 a request (ann made five), never settled.
	probe := d.Decide(ctx, rs, "GET", "/other", call{user: "ann"})
	if got, want := probe.Decision.Remaining, int64(100-5); got != want {
		t.Fatalf("requests rule: remaining %d, want %d", got, want)
	}
	var settles []string
	for _, l := range obs.take() {
		if len(l) > 6 && l[:6] == "settle" {
			settles = append(settles, l)
		}
	}
	want := []string{
		"settle tokens charged=0 refunded=15 stands=false",
		"settle tokens charged=0 refunded=0 stands=false",
		"settle tokens charged=0 refunded=0 stands=true",
		"settle tokens charged=0 refunded=0 stands=false",
		"settle tokens charged=130 refunded=0 stands=false",
	}
	if len(settles) != len(want) {
		t.Fatalf("settles observed:\n%q\nwant\n%q", settles, want)
	}
	for i := range want {
		if settles[i] != want[i] {
			t.Errorf("settle %d: %q, want %q", i, settles[i], want[i])
		}
	}
}

// TestDoorSettleEstimateAboveCapacity: an estimate above the rule's
// capacity is decided as the capacity, not refused as a configuration
// error, and the settle charges the rest.
func TestDoorSettleEstimateAboveCapacity(t *testing.T) {
	e := newTestEngine(t)
	estimate := int64(1 << 40)
	d := newTestDoor(t, e, func(c *sluice.DoorConfig[call]) {
		c.Key = func(q call, _ *sluice.CompiledRule) (string, int64, error) { return "user:" + q.user, estimate, nil }
	})
	rs := mustRuleset(t, []sluice.Rule{tokensRule("tokens", "/v1", 100)}, nil, "")
	out := d.Decide(context.Background(), rs, "POST", "/v1/chat", call{user: "ann"})
	if out.Verdict != sluice.Allowed || out.Decision.Remaining != 0 {
		t.Fatalf("verdict %v remaining %d err %v, want allowed with 0 left", out.Verdict, out.Decision.Remaining, out.Err)
	}
	d.Settle(context.Background(), &out, func(*sluice.CompiledRule) (int64, bool) { return 30, true })
	estimate = 1
	out = d.Decide(context.Background(), rs, "POST", "/v1/chat", call{user: "ann"})
	if out.Verdict != sluice.Allowed || out.Decision.Remaining != 69 {
		t.Fatalf("after a refund of 70: verdict %v remaining %d, want allowed with 69 left", out.Verdict, out.Decision.Remaining)
	}
}

// TestSettleConfigErrors: a rule's Settle is checked at compile, the
// error naming the rule and the field.
func TestSettleConfigErrors(t *testing.T) {
	base := tokensRule("tokens", "/v1", 100)
	for _, tc := range []struct {
		name  string
		s     sluice.Settle
		field string
	}{
		{"no actual", sluice.Settle{}, "settle"},
		{"two actuals", sluice.Settle{ActualHeader: "X-T", ActualField: "usage.total_tokens"}, "settle"},
		{"negative add", sluice.Settle{ActualHeader: "X-T", EstimateAdd: -1}, "settle.estimate_add"},
		{"huge body", sluice.Settle{ActualHeader: "X-T", MaxBody: 1 << 40}, "settle.max_body"},
		{"empty key", sluice.Settle{ActualField: "usage..total"}, "settle.actual_field"},
		{"bad estimate field", sluice.Settle{ActualHeader: "X-T", EstimateField: "."}, "settle.estimate_field"},
		{"bad header", sluice.Settle{ActualHeader: "X T"}, "settle.actual_header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := base
			s := tc.s
			r.Settle = &s
			err := r.Validate()
			var re *sluice.RuleError
			if !errors.As(err, &re) || re.Field != tc.field || re.Rule != "tokens" {
				t.Fatalf("Validate = %v, want a RuleError on rule tokens, field %s", err, tc.field)
			}
		})
	}
	shadow := base
	shadow.Shadow = true
	if err := shadow.Validate(); err == nil {
		t.Fatal("a shadow rule with settle validated")
	}
}
