package envoyrls_test

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice/envoyrls"
)

// A calendar month limit counts the month in its zone and tells Envoy the
// time to the month's real end; a limit without calendar: true keeps
// envoyproxy/ratelimit's 30 days from the epoch.
func TestCalendarMonthLimit(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, `domain: saas
descriptors:
  - key: org
    rate_limit: {unit: month, requests_per_unit: 2, calendar: true, timezone: America/New_York}
  - key: team
    rate_limit: {unit: month, requests_per_unit: 2}
`)
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	// 23:00 on February 28, 2028 in New York, a leap year: a day and an
	// hour before March starts there.
	now := time.Date(2028, 2, 28, 23, 0, 0, 0, ny)
	f.clock.Set(now)
	for i, want := range []string{"OK: OK", "OK: OK", "OVER_LIMIT: OVER_LIMIT"} {
		r := f.ask(t, "saas", 0, desc("org", "acme"))
		if got := codesOf(r); got != want {
			t.Fatalf("request %d: %s, want %s", i, got, want)
		}
		if got, want := r.Statuses[0].DurationUntilReset.AsDuration(), 25*time.Hour; got != want {
			t.Errorf("request %d: duration until reset %v, want %v (to March 1 in New York)", i, got, want)
		}
	}
	f.clock.Set(time.Date(2028, 3, 1, 0, 0, 0, 0, ny))
	if got := codesOf(f.ask(t, "saas", 0, desc("org", "acme"))); got != "OK: OK" {
		t.Errorf("March 1 in New York: %s, want a fresh month", got)
	}
	// The 30-day unit: the window holding now, from the epoch.
	f.clock.Set(now)
	r := f.ask(t, "saas", 0, desc("team", "a"))
	month := int64(30 * 24 * time.Hour)
	if got, want := r.Statuses[0].DurationUntilReset.AsDuration(), time.Duration(month-now.UnixNano()%month); got != want {
		t.Errorf("a 30-day month: duration until reset %v, want %v", got, want)
	}
}
