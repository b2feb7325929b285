package rlsfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/envoyrls"
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

// CalendarMonth (USE_CALENDAR_MONTH_RATE_LIMIT, --calendar-month) makes
// every fixed_window and sliding_counter month limit a UTC calendar month,
// keeps a limit's own calendar and the buckets' 30 days, and refuses a
// month limit with a unit_multiplier above 1.
func TestCalendarMonthOption(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "saas.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`domain: saas
descriptors:
  - key: org
    rate_limit: {unit: month, requests_per_unit: 10000}
  - key: team
    rate_limit: {unit: month, requests_per_unit: 1000, calendar: true, timezone: Asia/Kolkata}
  - key: user
    rate_limit: {unit: month, requests_per_unit: 100, algorithm: gcra}
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 100}
`)
	for _, on := range []bool{false, true} {
		c, err := LoadWith(dir, envoyrls.LoadOptions{CalendarMonth: on})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, name := range c.Domains() {
			for _, l := range c.Domain(name).Limits() {
				p := l.EngineLimit().Algorithm.Params()
				got = append(got, fmt.Sprintf("%s %v [%s]", l.Path, p.Window, p.Calendar))
			}
		}
		want := "saas.org 720h0m0s [] saas.team 0s [month in Asia/Kolkata from day 1] saas.user 720h0m0s [] saas.ip 24h0m0s []"
		if on {
			want = "saas.org 0s [month in UTC from day 1] saas.team 0s [month in Asia/Kolkata from day 1] saas.user 720h0m0s [] saas.ip 24h0m0s []"
		}
		if g := strings.Join(got, " "); g != want {
			t.Errorf("CalendarMonth %v:\n got %s\nwant %s", on, g, want)
		}
	}
	write("domain: saas\ndescriptors:\n  - key: org\n    rate_limit: {unit: month, requests_per_unit: 1, unit_multiplier: 2}\n")
	if _, err := LoadWith(dir, envoyrls.LoadOptions{CalendarMonth: true}); err == nil || !strings.Contains(err.Error(), "unit_multiplier 2 is not taken") {
		t.Errorf("a two-month limit under CalendarMonth: %v, want it refused", err)
	}
}
