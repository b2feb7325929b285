package sluice_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

// monthly is a valid calendar rule the cases below break one field at a
// time: 10,000 a month per user, from the 15th in Berlin.
func monthly() sluice.Rule {
	return sluice.Rule{
		Name: "monthly", PathPrefix: "/v1/", Scope: sluice.ScopeUser, Algorithm: algo.FixedWindowName,
		Limit: 10_000, Calendar: "month", Timezone: "Europe/Berlin", Anchor: "15",
	}
}

func TestCalendarRuleFields(t *testing.T) {
	for _, tt := range []struct {
		name  string
		edit  func(*sluice.Rule)
		field string // "" for a valid rule
	}{
		{"as is", func(*sluice.Rule) {}, ""},
		{"sliding counter", func(r *sluice.Rule) { r.Algorithm = algo.SlidingCounterName }, ""},
		{"UTC by default", func(r *sluice.Rule) { r.Timezone = "" }, ""},
		{"billing day and time", func(r *sluice.Rule) { r.Anchor = "31 06:30" }, ""},
		{"day from 06:00", func(r *sluice.Rule) { r.Calendar, r.Anchor = "day", "06:00" }, ""},
		{"week from Sunday", func(r *sluice.Rule) { r.Calendar, r.Anchor = "week", "Sunday 02:30" }, ""},
		{"fiscal year", func(r *sluice.Rule) { r.Calendar, r.Anchor = "year", "04-06" }, ""},
		{"a leap day", func(r *sluice.Rule) { r.Calendar, r.Anchor = "year", "02-29" }, ""},
		{"unknown unit", func(r *sluice.Rule) { r.Calendar = "fortnight" }, "calendar"},
		{"token bucket", func(r *sluice.Rule) { r.Algorithm = algo.TokenBucketName }, "calendar"},
		{"gcra", func(r *sluice.Rule) { r.Algorithm = algo.GCRAName }, "calendar"},
		{"sliding log", func(r *sluice.Rule) { r.Algorithm = algo.SlidingLogName }, "calendar"},
		{"a window too", func(r *sluice.Rule) { r.Window = time.Hour }, "window"},
		{"unknown zone", func(r *sluice.Rule) { r.Timezone = "Europe/Atlantis" }, "timezone"},
		{"the host's zone", func(r *sluice.Rule) { r.Timezone = "Local" }, "timezone"},
		{"zone without a calendar", func(r *sluice.Rule) { r.Calendar, r.Anchor, r.Window = "", "", time.Hour }, "timezone"},
		{"anchor without a calendar", func(r *sluice.Rule) { r.Calendar, r.Timezone, r.Window = "", "", time.Hour }, "anchor"},
		{"billing day 0", func(r *sluice.Rule) { r.Anchor = "0" }, "anchor"},
		{"billing day 32", func(r *sluice.Rule) { r.Anchor = "32" }, "anchor"},
		{"billing day with a bad time", func(r *sluice.Rule) { r.Anchor = "15 24:00" }, "anchor"},
		{"a day takes a time only", func(r *sluice.Rule) { r.Calendar, r.Anchor = "day", "15" }, "anchor"},
		{"a weekday misspelt", func(r *sluice.Rule) { r.Calendar, r.Anchor = "week", "mondey" }, "anchor"},
		{"February 30", func(r *sluice.Rule) { r.Calendar, r.Anchor = "year", "02-30" }, "anchor"},
		{"month 13", func(r *sluice.Rule) { r.Calendar, r.Anchor = "year", "13-01" }, "anchor"},
		{"a burst", func(r *sluice.Rule) { r.Burst = 5 }, "burst"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := monthly()
			tt.edit(&r)
			err := r.Validate()
			var re *sluice.RuleError
			switch {
			case tt.field == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.field == "":
			case !errors.As(err, &re) || re.Field != tt.field || re.Rule != "monthly" || !errors.Is(err, sluice.ErrInvalidRule):
				t.Fatalf("Validate() = %v, want a RuleError of rule monthly on %q", err, tt.field)
			}
		})
	}
}

// TestCalendarRuleFieldsPointAtTheBoundary: a calendar rule's rate-limit
// fields say when its window really ends, and its RateLimit-Policy's w is
// the longest its window can be (algo.Calendar.Longest).
func TestCalendarRuleFieldsPointAtTheBoundary(t *testing.T) {
	r := monthly()
	r.Limit = 2
	rs, err := sluice.NewRuleset([]sluice.Rule{r}, nil, sluice.MatchMostSpecific)
	if err != nil {
		t.Fatal(err)
	}
	c := rs.Rule("monthly")
	// 31 days and the hour Berlin's clocks go forward in summer.
	if got, want := c.Policy(), `"monthly";q=2;w=2682000`; got != want {
		t.Errorf("Policy() = %s, want %s", got, want)
	}
	if got, want := c.Per(), "month in Europe/Berlin from day 15"; got != want {
		t.Errorf("Per() = %q, want %q", got, want)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	// An hour before the window of October 15 ends, on November 15: 31
	// days and 23 hours in, and the hour clocks went back on October 25.
	now := time.Date(2026, 11, 14, 23, 0, 0, 0, berlin).UnixNano()
	a := c.Limit().Algorithm
	state, d := a.Step(nil, now, 2)
	if got, want := d.Reset, time.Hour; !d.Allowed || got != want {
		t.Fatalf("Reset = %v (allowed %v), want %v", got, d.Allowed, want)
	}
	if got, want := string(c.AppendRateLimit(nil, d)), `"monthly";r=0;t=3600`; got != want {
		t.Errorf("RateLimit = %s, want %s", got, want)
	}
	_, d = a.Step(state, now+int64(30*time.Minute), 1)
	if got, want := sluice.RetryAfterSeconds(d), int64(1800); d.Allowed || got != want {
		t.Errorf("Retry-After = %d (allowed %v), want %d", got, d.Allowed, want)
	}
}
