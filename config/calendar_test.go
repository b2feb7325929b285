package config_test

import (
	"testing"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/config"
)

// TestCalendarRule: a calendar rule reads calendar, timezone and anchor,
// takes no window, and its errors name the line, the rule and the field.
func TestCalendarRule(t *testing.T) {
	const head = "rules:\n  - name: monthly\n    path_prefix: /v1/\n    scope: user\n    limit: 10000\n"
	c, err := config.Parse("c.yaml", []byte(head+"    algorithm: fixed_window\n    calendar: month\n    timezone: Europe/Berlin\n    anchor: 15\n"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := c.Ruleset()
	if err != nil {
		t.Fatal(err)
	}
	cal := rs.Rule("monthly").Limit().Algorithm.Params().Calendar
	if cal.Unit != algo.CalendarMonth || cal.Location.String() != "Europe/Berlin" || cal.Day != 15 {
		t.Errorf("calendar = %v, want month in Europe/Berlin from day 15", cal)
	}
	for _, tt := range []struct{ name, rule, want string }{
		{"no window and no calendar", "    algorithm: fixed_window\n",
			`c.yaml:2: rules[0].window: rule "monthly": required`},
		{"a window too", "    algorithm: fixed_window\n    calendar: month\n    window: 720h\n",
			`c.yaml:8: rules[0].window: rule "monthly": a calendar rule's window is its calendar's month; leave window out, got 720h0m0s`},
		{"unknown zone", "    algorithm: fixed_window\n    calendar: month\n    timezone: Mars/Olympus\n",
			`c.yaml:8: rules[0].timezone: rule "monthly": unknown time zone "Mars/Olympus": want an IANA name such as Europe/Berlin or America/New_York`},
		{"billing day out of range", "    algorithm: fixed_window\n    calendar: month\n    anchor: 32\n",
			`c.yaml:8: rules[0].anchor: rule "monthly": want the day of the month 1 to 31, "15", and its time, "15 06:00", got "32"`},
		{"token bucket", "    algorithm: token_bucket\n    calendar: day\n",
			`c.yaml:7: rules[0].calendar: rule "monthly": only fixed_window and sliding_counter follow a calendar, not token_bucket`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("c.yaml", []byte(head+tt.rule))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error:\n got %v\nwant %s", err, tt.want)
			}
		})
	}
}
