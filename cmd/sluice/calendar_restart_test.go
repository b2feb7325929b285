package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestCalendarRestartKeepsTheMonth: a monthly quota spent on Pebble or
// bbolt is still spent after the store is closed and opened again by
// another run, to the second before the month turns; at the turn a
// fixed window starts afresh, and a sliding counter still weighs the month
// before, which the reopened store kept too. The month billed on the 31st
// in Berlin ends on February 28 at 00:00 (February has no 31st).
func TestCalendarRestartKeepsTheMonth(t *testing.T) {
	t.Parallel()
	const (
		noon    = 1803726000 // 2027-02-27 12:00 CET
		lastSec = 1803769199 // 2027-02-27 23:59:59 CET
		turn    = 1803769200 // 2027-02-28 00:00 CET
	)
	line := func(t int64) string { return fmt.Sprintf(`{"t": %d, "key": "org-7"}`+"\n", t) }
	for _, store := range []string{"pebble", "bolt"} {
		for _, c := range []struct{ algorithm, beforeTurn, atTurn string }{
			{"fixed_window",
				`{"allowed":false,"limit":3,"remaining":0,"retry_after":1,"delay":0,"reset":1,"key":"org-7"}`,
				`{"allowed":true,"limit":3,"remaining":2,"retry_after":0,"delay":0,"reset":2674800,"key":"org-7"}`},
			// The 28-day month before weighs in the next, 2674800 s long
			// (31 days less the hour of March 28), by the part of it a
			// span as long, ending now, covers: a request fits once 3·f/28
			// days + 1 <= 3, 1062000 s into the new month.
			{"sliding_counter",
				`{"allowed":false,"limit":3,"remaining":0,"retry_after":1062001,"delay":0,"reset":2674801,"key":"org-7"}`,
				`{"allowed":false,"limit":3,"remaining":0,"retry_after":1062000,"delay":0,"reset":2674800,"key":"org-7"}`},
		} {
			t.Run(store+"/"+c.algorithm, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				run := func(trace string) []string {
					t.Helper()
					var out, stderr bytes.Buffer
					args := []string{"--algorithm", c.algorithm, "--limit", "3", "--calendar", "month", "--timezone", "Europe/Berlin", "--anchor", "31",
						"--backend", store, "--dir", dir, "--durability", "sync"}
					if code := runSimulate(args, strings.NewReader(trace), &out, &stderr); code != 0 {
						t.Fatalf("simulate exited %d: %s", code, stderr.String())
					}
					return strings.Split(strings.TrimSpace(out.String()), "\n")
				}
				first := run(line(noon) + line(noon) + line(noon))
				if got := first[2]; !strings.HasPrefix(got, `{"allowed":true,"limit":3,"remaining":0,`) {
					t.Fatalf("the third request of the month: %s, want the last one allowed", got)
				}
				second := run(line(lastSec) + line(turn))
				if got := second[0]; got != c.beforeTurn {
					t.Errorf("after the restart, a second before the month turns:\n got %s\nwant %s", got, c.beforeTurn)
				}
				if got := second[1]; got != c.atTurn {
					t.Errorf("after the restart, as the month turns:\n got %s\nwant %s", got, c.atTurn)
				}
			})
		}
	}
}
