package httplimit

import (
	"testing"
	"time"
	_ "time/tzdata" // Europe/Berlin, on a host without a zone database

	"github.com/sluice-go/sluice"
)

// TestCalendarHeaders: a calendar rule's headers point at the real end of
// its window (a Berlin day of 25 hours, the day clocks go back), and its
// RateLimit-Policy's w is the longest its window can be.
func TestCalendarHeaders(t *testing.T) {
	daily := sluice.Rule{Name: "daily", PathPrefix: "/api/", Scope: sluice.ScopeIP, Algorithm: "fixed_window", Limit: 2,
		Calendar: "day", Timezone: "Europe/Berlin"}
	f := newFixture(t, []sluice.Rule{daily}, fixtureOpts{})
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Set(time.Date(2026, 10, 25, 0, 30, 0, 0, berlin)) // half an hour into a 25-hour day
	for i, want := range []struct {
		code                    int
		reset, rateLimit, retry string
	}{
		{200, "88200", `"daily";r=1;t=88200`, ""},
		{200, "88200", `"daily";r=0;t=88200`, ""},
		{429, "88200", `"daily";r=0;t=88200`, "88200"},
	} {
		w := f.do("GET", "/api/x", "203.0.113.9:1234")
		h := w.Header()
		if w.Code != want.code || h.Get("X-RateLimit-Reset") != want.reset || h.Get("RateLimit") != want.rateLimit || h.Get("Retry-After") != want.retry {
			t.Errorf("request %d: %d, X-RateLimit-Reset %q, RateLimit %q, Retry-After %q; want %d, %q, %q, %q", i, w.Code,
				h.Get("X-RateLimit-Reset"), h.Get("RateLimit"), h.Get("Retry-After"), want.code, want.reset, want.rateLimit, want.retry)
		}
		if got, want := h.Get("RateLimit-Policy"), `"daily";q=2;w=90000`; got != want {
			t.Errorf("request %d: RateLimit-Policy %q, want %q", i, got, want)
		}
	}
}
