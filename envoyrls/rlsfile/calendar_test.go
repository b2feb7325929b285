package rlsfile

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
)

// A rate_limit with calendar: true counts calendar units in its time zone;
// without it, a month is envoyproxy/ratelimit's 30 days. Errors name the
// line and the field.
func TestCalendarRateLimit(t *testing.T) {
	d, err := ParseFile("f.yaml", []byte(`domain: saas
descriptors:
  - key: org
    rate_limit: {unit: month, requests_per_unit: 10000, calendar: true, timezone: Europe/Berlin}
  - key: team
    rate_limit: {unit: month, requests_per_unit: 1000}
  - key: user
    rate_limit: {unit: DAY, requests_per_unit: 100, calendar: true, algorithm: sliding_counter}
`))
	if err != nil {
		t.Fatal(err)
	}
	ls := d.Limits()
	cal := func(i int) algo.Calendar { return ls[i].EngineLimit().Algorithm.Params().Calendar }
	if c := cal(0); c.Unit != algo.CalendarMonth || c.Location.String() != "Europe/Berlin" {
		t.Errorf("org: calendar %v, want a month in Europe/Berlin", c)
	}
	if c, w := cal(1), ls[1].EngineLimit().Algorithm.Params().Window; !c.IsZero() || w != 30*24*time.Hour {
		t.Errorf("team: calendar %v, window %v; want none, 30 days", c, w)
	}
	if c := cal(2); c.Unit != algo.CalendarDay || c.Location != time.UTC {
		t.Errorf("user: calendar %v, want a day in UTC", c)
	}
	const head = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n"
	for _, tt := range []struct{ name, rl, want string }{
		{"a second", "      unit: second\n      calendar: true\n", "f.yaml:7: descriptors[0].rate_limit.calendar: a calendar's unit is day, week, month or year, not second"},
		{"two months", "      unit: month\n      unit_multiplier: 2\n      calendar: true\n", "f.yaml:8: descriptors[0].rate_limit.calendar: a calendar counts one month at a time; unit_multiplier 2 is not taken"},
		{"a bucket", "      unit: month\n      algorithm: token_bucket\n      calendar: true\n", "f.yaml:8: descriptors[0].rate_limit.calendar: only fixed_window and sliding_counter follow a calendar, not token_bucket"},
		{"unknown zone", "      unit: month\n      calendar: true\n      timezone: Mars/Olympus\n", `f.yaml:8: descriptors[0].rate_limit.timezone: unknown time zone "Mars/Olympus"`},
		{"a zone alone", "      unit: month\n      timezone: Europe/Berlin\n", "f.yaml:7: descriptors[0].rate_limit.timezone: only a calendar rate_limit takes a time zone; add calendar: true"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseFile("f.yaml", []byte(head+tt.rl))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error %v, want it to start with %q", err, tt.want)
			}
		})
	}
}
