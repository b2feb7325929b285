package sluice_test

import (
	"context"
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

// A reload that changes a calendar rule's time zone or anchor keeps what
// its callers spent: a record written under the old calendar is read as
// spent evenly from its window's start to the first step after the reload,
// and the new calendar's window in progress is charged its part of that
// time, rounded up. Nobody is handed a fresh period, and a record of the
// window that has just ended under the new calendar is not charged whole
// to the one that has begun. Each caller spent 60 of 100 before the
// reload, on each kind of store (Redis's compare-and-swap path among them).
func TestCalendarReloadKeepsWhatWasSpent(t *testing.T) {
	utc := func(mo time.Month, d, h int) time.Time { return time.Date(2025, mo, d, h, 0, 0, 0, time.UTC) }
	for _, tt := range []struct {
		name            string
		algorithm       algo.Name
		before, after   func(*sluice.Rule)
		spent, reload   time.Time
		remaining       int64     // at the reload
		fullAt, freshAt time.Time // when the caller is full again; when a new window gives it the whole limit
	}{
		{
			// Berlin's December began Nov 30 23:00 UTC, New York's Dec 1
			// 05:00: 151 of the 157 hours since are New York's December.
			name: "zone fixed a week in", algorithm: algo.FixedWindowName,
			before: func(r *sluice.Rule) { r.Timezone = "Europe/Berlin" }, after: func(r *sluice.Rule) { r.Timezone = "America/New_York" },
			spent: utc(12, 3, 12), reload: utc(12, 7, 12), remaining: 100 - 58, // ceil(60·151/157)
			fullAt: time.Date(2026, 1, 1, 5, 0, 0, 0, time.UTC), freshAt: time.Date(2026, 1, 1, 5, 0, 0, 0, time.UTC),
		},
		{
			// The new November (to Dec 1 05:00 UTC) covers 6 of the 157
			// hours: ceil(60·6/157) = 3 of the previous window, weighing
			// 593 of its 721 hours 151 hours into the new December.
			name: "zone fixed a week in, sliding", algorithm: algo.SlidingCounterName,
			before: func(r *sluice.Rule) { r.Timezone = "Europe/Berlin" }, after: func(r *sluice.Rule) { r.Timezone = "America/New_York" },
			spent: utc(12, 3, 12), reload: utc(12, 7, 12), remaining: 39, // floor(100 - 58 - 3·593/721)
			fullAt: time.Date(2026, 2, 1, 5, 0, 0, 0, time.UTC), freshAt: time.Date(2026, 2, 1, 5, 0, 0, 0, time.UTC),
		},
		{
			// Billed from the 15th, then from the 1st, on Dec 7: 6 of the
			// 22 days since Nov 15 are the new December's.
			name: "billing day moved earlier", algorithm: algo.FixedWindowName,
			before: func(r *sluice.Rule) { r.Anchor = "15" }, after: func(r *sluice.Rule) { r.Anchor = "" },
			spent: utc(11, 20, 0), reload: utc(12, 7, 0), remaining: 100 - 17, // ceil(60·6/22)
			fullAt: utc(1, 1, 0).AddDate(1, 0, 0), freshAt: utc(1, 1, 0).AddDate(1, 0, 0),
		},
		{
			// Billed from the 1st, then from the 15th, on Dec 7: the new
			// window runs Nov 15 to Dec 15, the record started in it, and
			// is kept whole until it ends.
			name: "billing day moved later", algorithm: algo.FixedWindowName,
			before: func(r *sluice.Rule) { r.Anchor = "" }, after: func(r *sluice.Rule) { r.Anchor = "15" },
			spent: utc(12, 3, 0), reload: utc(12, 7, 0), remaining: 40,
			fullAt: utc(12, 15, 0), freshAt: utc(12, 15, 0),
		},
		{
			// New York's November, spent in, ends Dec 1 05:00 UTC; Berlin's
			// December began at 23:00: 4 of its 719 hours are the new
			// December's. Charging it whole would block the caller for
			// all of December.
			name: "zone changed between the two boundaries", algorithm: algo.FixedWindowName,
			before: func(r *sluice.Rule) { r.Timezone = "America/New_York" }, after: func(r *sluice.Rule) { r.Timezone = "Europe/Berlin" },
			spent: utc(11, 20, 0), reload: utc(12, 1, 3), remaining: 100 - 1, // ceil(60·4/719)
			fullAt: time.Date(2025, 12, 31, 23, 0, 0, 0, time.UTC), freshAt: time.Date(2025, 12, 31, 23, 0, 0, 0, time.UTC),
		},
		{
			// A day from midnight UTC, then from 06:00 UTC, at 12:00:
			// 6 of the 12 hours since midnight are the new day's.
			name: "a day's start moved", algorithm: algo.FixedWindowName,
			before: func(r *sluice.Rule) { r.Calendar, r.Anchor = "day", "" }, after: func(r *sluice.Rule) { r.Calendar, r.Anchor = "day", "06:00" },
			spent: utc(12, 7, 1), reload: utc(12, 7, 12), remaining: 100 - 30,
			fullAt: utc(12, 8, 6), freshAt: utc(12, 8, 6),
		},
	} {
		for store, open := range usageStores() {
			t.Run(tt.name+"/"+store, func(t *testing.T) {
				e, clock := open(t)
				clock.Set(tt.spent)
				d := newTestDoor(t, e, nil)
				ruleset := func(edit func(*sluice.Rule)) *sluice.Ruleset {
					r := sluice.Rule{Name: "quota", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: tt.algorithm, Limit: 100, Calendar: "month", Timezone: "UTC"}
					edit(&r)
					return mustRuleset(t, []sluice.Rule{r}, nil, "")
				}
				ctx, acme := context.Background(), call{user: "acme"}
				old := ruleset(tt.before)
				for i := range 60 {
					if o := d.Decide(ctx, old, "GET", "/", acme); o.Verdict != sluice.Allowed {
						t.Fatalf("request %d before the reload: %v", i, o.Verdict)
					}
				}
				clock.Set(tt.reload)
				rs := ruleset(tt.after)
				u, err := d.Usage(ctx, rs, "GET", "/", acme)
				if err != nil {
					t.Fatal(err)
				}
				l := u.Limits[0]
				if l.Remaining != tt.remaining || !u.At.Add(l.Reset).Equal(tt.fullAt) {
					t.Errorf("after the reload: %d left, full at %v; want %d, full at %v", l.Remaining, u.At.Add(l.Reset).UTC(), tt.remaining, tt.fullAt)
				}
				// The next request spends from what is left, and rewrites the
				// record at the new calendar's boundary: the same reading after.
				if o := d.Decide(ctx, rs, "GET", "/", acme); o.Verdict != sluice.Allowed {
					t.Fatalf("a request after the reload: %v", o.Verdict)
				}
				if u, _ := d.Usage(ctx, rs, "GET", "/", acme); u.Limits[0].Remaining != tt.remaining-1 {
					t.Errorf("after one more request: %d left, want %d", u.Limits[0].Remaining, tt.remaining-1)
				}
				clock.Set(tt.freshAt)
				if u, _ := d.Usage(ctx, rs, "GET", "/", acme); u.Limits[0].Remaining != 100 {
					t.Errorf("at %v: %d left, want the whole 100", tt.freshAt, u.Limits[0].Remaining)
				}
				clock.Set(tt.freshAt.Add(-time.Nanosecond))
				if u, _ := d.Usage(ctx, rs, "GET", "/", acme); u.Limits[0].Remaining == 100 {
					t.Errorf("a nanosecond before %v: the whole 100 already", tt.freshAt)
				}
			})
		}
	}
}
