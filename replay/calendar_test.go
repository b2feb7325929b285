package replay

import (
	"testing"
	"time"
	_ "time/tzdata" // the zones below, on a host without a zone database

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
)

// A caller's need under a calendar rule is the least limit under which the
// algorithm itself denies none of its requests: windows of unequal length
// (months, days across a change of summer time) weighed as the algorithm
// weighs them.
func TestCalendarNeedIsTheLeastLimitThatAdmitsAll(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.SampledFrom([]algo.Name{algo.FixedWindowName, algo.SlidingCounterName}).Draw(t, "algorithm")
		unit := rapid.SampledFrom([]algo.Unit{algo.CalendarDay, algo.CalendarMonth}).Draw(t, "unit")
		p := algo.Params{Limit: int64(rapid.IntRange(1, 20).Draw(t, "limit")), Calendar: algo.Calendar{Unit: unit, Location: berlin, Day: 31 * int(btoi(unit == algo.CalendarMonth))}}
		a := algo.MustNew(name, p)
		// From the day before Berlin's clocks go back in 2026, or the end
		// of January 2028 (a leap February).
		at := rapid.SampledFrom([]int64{time.Date(2026, 10, 24, 12, 0, 0, 0, berlin).UnixNano(), time.Date(2028, 1, 30, 0, 0, 0, 0, berlin).UnixNano()}).Draw(t, "from")
		length := int64(24 * time.Hour)
		if unit == algo.CalendarMonth {
			length *= 30
		}
		var trace []int64
		var tr needTracker
		for range rapid.IntRange(1, 40).Draw(t, "n") {
			gap := rapid.SampledFrom([]int64{0, 1, length / 7, length - 1, length, length + 1, length / 2, int64(time.Hour)}).Draw(t, "gap")
			if rapid.Bool().Draw(t, "to the boundary") {
				_, end, _ := algo.WindowOf(a, at)
				gap = end - at + rapid.Int64Range(-1, 1).Draw(t, "off")
			}
			at += max(gap, 0)
			cost := int64(rapid.IntRange(1, 3).Draw(t, "cost"))
			trace = append(trace, at, cost)
			tr.addCalendar(kindFor(name), a, at, cost)
		}
		need := tr.finish(name, p)
		if !admitsAll(name, p, need, trace) {
			t.Fatalf("%s: need %d, but the algorithm at limit %d denies a request", name, need, need)
		}
		for l := int64(1); l < need; l++ {
			if admitsAll(name, p, l, trace) {
				t.Fatalf("%s: need %d, but limit %d admits every request", name, need, l)
			}
		}
	})
}

func btoi(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
