package algo

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/big"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, on a host without a zone database

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/codec"
)

// The calendar's windows, checked against a brute-force model that knows
// nothing of zone periods: a window starts at the first whole minute at
// which the zone's wall clock (time.Time.In) reads the anchor or later,
// found by trying every minute of the two days before it.

// raceExamples is how many examples the brute-force model tests check
// under the race detector: their arithmetic runs on one goroutine, so the
// detector finds nothing in the rest but costs a minute.
const raceExamples = 10

// calendarZones are zones with changes of every kind: an hour in summer
// both sides of the equator, half an hour (Lord Howe), none since 1945
// (Kolkata, +05:30), and a +12:45/+13:45 zone (Chatham).
var calendarZones = []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "Pacific/Chatham", "UTC"}

func mustZone(t interface{ Fatal(...any) }, name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// modelStart returns the first whole minute at which loc's wall clock
// reads wall (seconds, as if in UTC) or later, by trying each minute.
func modelStart(loc *time.Location, wall int64) int64 {
	k := startKey{loc, wall}
	if t, ok := modelStarts[k]; ok {
		return t
	}
	t := scanStart(loc, wall)
	modelStarts[k] = t
	return t
}

type startKey struct {
	loc  *time.Location
	wall int64
}

// modelStarts remembers modelStart's answers: the tests that use it do
// not run in parallel.
var modelStarts = map[startKey]int64{}

func scanStart(loc *time.Location, wall int64) int64 {
	for t := wall - 2*86400; ; t += 60 {
		tt := time.Unix(t, 0).In(loc)
		y, m, d := tt.Date()
		reads := time.Date(y, m, d, tt.Hour(), tt.Minute(), tt.Second(), 0, time.UTC).Unix()
		if reads >= wall {
			return t
		}
	}
}

// modelAnchors returns the anchors' wall readings (as UTC seconds) of the
// windows near the wall date of sec, in order.
func modelAnchors(c Calendar, sec int64) []int64 {
	loc := c.location()
	lt := time.Unix(sec, 0).In(loc)
	y, m, _ := lt.Date()
	at := func(y int, m time.Month, d int) int64 {
		last := time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
		return time.Date(y, m, min(d, last), 0, 0, 0, 0, time.UTC).Add(c.Start).Unix()
	}
	var out []int64
	switch c.Unit {
	case CalendarDay, CalendarWeek:
		for i := -30; i <= 30; i++ {
			day := time.Date(y, m, lt.Day()+i, 0, 0, 0, 0, time.UTC)
			if c.Unit == CalendarWeek && day.Weekday() != isoWeekday(c.weekday()) {
				continue
			}
			out = append(out, day.Add(c.Start).Unix())
		}
	case CalendarMonth:
		for i := -3; i <= 3; i++ {
			first := time.Date(y, m+time.Month(i), 1, 0, 0, 0, 0, time.UTC)
			out = append(out, at(first.Year(), first.Month(), c.day()))
		}
	case CalendarYear:
		for i := -3; i <= 3; i++ {
			out = append(out, at(y+i, c.month(), c.day()))
		}
	}
	return out
}

// modelSpan returns the windows around now by brute force.
func modelSpan(c Calendar, now int64) windowSpan {
	sec := civilDiv(now, 1e9)
	var starts []int64
	for _, w := range modelAnchors(c, sec) {
		starts = append(starts, modelStart(c.location(), w))
	}
	for i := 1; i+2 < len(starts); i++ {
		if starts[i] <= sec && sec < starts[i+1] {
			return windowSpan{starts[i-1] * 1e9, starts[i] * 1e9, starts[i+1] * 1e9, starts[i+2] * 1e9}
		}
	}
	panic(fmt.Sprintf("no window of %v holds %d among %v", c, sec, starts))
}

// drawCalendar draws a calendar of any unit and anchor in one of
// calendarZones.
func drawCalendar(t *rapid.T) Calendar {
	c := Calendar{
		Unit:     rapid.SampledFrom(Units).Draw(t, "unit"),
		Location: mustZone(t, rapid.SampledFrom(calendarZones).Draw(t, "zone")),
		// Around midnight and the hours clocks change at, and any other.
		Start: time.Duration(rapid.SampledFrom([]int{0, 0, 60, 120, 150, 180, 24*60 - 1}).Draw(t, "start")) * time.Minute,
	}
	if rapid.Bool().Draw(t, "any start") {
		c.Start = time.Duration(rapid.IntRange(0, 24*60-1).Draw(t, "start minute")) * time.Minute
	}
	switch c.Unit {
	case CalendarWeek:
		c.Day = rapid.IntRange(0, 7).Draw(t, "weekday")
	case CalendarMonth:
		c.Day = rapid.SampledFrom([]int{0, 1, 15, 28, 29, 30, 31}).Draw(t, "day")
	case CalendarYear:
		c.Month = time.Month(rapid.IntRange(0, 12).Draw(t, "month"))
		c.Day = rapid.IntRange(0, daysIn(2000, c.month())).Draw(t, "day")
	}
	return c
}

// drawInstant draws an instant from 1970 to 2100, often within hours of a
// change of c's zone's offset.
func drawInstant(t *rapid.T, c Calendar) int64 {
	sec := rapid.Int64Range(0, 4102444800).Draw(t, "instant")
	if rapid.Bool().Draw(t, "near a change") {
		_, end := time.Unix(sec, 0).In(c.location()).ZoneBounds()
		if !end.IsZero() {
			sec = end.Unix() + rapid.Int64Range(-3*3600, 3*3600).Draw(t, "from the change")
		}
	}
	return sec*1e9 + rapid.SampledFrom([]int64{0, 0, 1, 999_999_999}).Draw(t, "ns")
}

// TestCalendarModel: the windows around any instant are the brute-force
// model's, whichever unit, anchor and zone.
func TestCalendarModel(t *testing.T) {
	n := 0
	rapid.Check(t, func(t *rapid.T) {
		if n++; raceEnabled && n > raceExamples {
			return
		}
		c := drawCalendar(t)
		if err := c.check(); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		now := drawInstant(t, c)
		got, want := newCalendar(c).compute(now), modelSpan(c, now)
		if got != want {
			t.Fatalf("%v at %v: span %v, want %v", c, time.Unix(0, now).In(c.location()), fmtSpan(c, got), fmtSpan(c, want))
		}
	})
}

func fmtSpan(c Calendar, s windowSpan) string {
	f := func(n int64) string { return time.Unix(0, n).In(c.location()).Format("2006-01-02 15:04 MST") }
	return fmt.Sprintf("[%s | %s, %s) %s", f(s.prev), f(s.start), f(s.end), f(s.next))
}

// TestCalendarWindows walks named windows: days of 23, 24.5 and 25 hours,
// billing days past a short month's end, leap years.
func TestCalendarWindows(t *testing.T) {
	berlin, lordHowe, kolkata := mustZone(t, "Europe/Berlin"), mustZone(t, "Australia/Lord_Howe"), mustZone(t, "Asia/Kolkata")
	for _, tc := range []struct {
		name       string
		c          Calendar
		at         time.Time
		start, end time.Time
	}{
		{"a Berlin day in spring is 23 hours", Calendar{Unit: CalendarDay, Location: berlin},
			time.Date(2026, 3, 29, 12, 0, 0, 0, berlin), time.Date(2026, 3, 29, 0, 0, 0, 0, berlin), time.Date(2026, 3, 30, 0, 0, 0, 0, berlin)},
		{"a Berlin day in autumn is 25 hours", Calendar{Unit: CalendarDay, Location: berlin},
			time.Date(2026, 10, 25, 23, 59, 0, 0, berlin), time.Date(2026, 10, 25, 0, 0, 0, 0, berlin), time.Date(2026, 10, 26, 0, 0, 0, 0, berlin)},
		{"a day starting at 02:30 in Berlin starts at 03:00 on the day 02:30 is skipped", Calendar{Unit: CalendarDay, Location: berlin, Start: 150 * time.Minute},
			time.Date(2026, 3, 29, 12, 0, 0, 0, berlin), time.Unix(time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC).Unix(), 0), time.Date(2026, 3, 30, 2, 30, 0, 0, berlin)},
		{"a day starting at 02:30 starts at the first 02:30 when it is read twice", Calendar{Unit: CalendarDay, Location: berlin, Start: 150 * time.Minute},
			time.Date(2026, 10, 25, 12, 0, 0, 0, berlin), time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), time.Date(2026, 10, 26, 2, 30, 0, 0, berlin)},
		{"a Lord Howe day in April is 24.5 hours", Calendar{Unit: CalendarDay, Location: lordHowe},
			time.Date(2026, 4, 5, 12, 0, 0, 0, lordHowe), time.Date(2026, 4, 5, 0, 0, 0, 0, lordHowe), time.Date(2026, 4, 6, 0, 0, 0, 0, lordHowe)},
		{"a billing day of 31 starts February's window on the 28th", Calendar{Unit: CalendarMonth, Location: kolkata, Day: 31},
			time.Date(2027, 3, 1, 0, 0, 0, 0, kolkata), time.Date(2027, 2, 28, 0, 0, 0, 0, kolkata), time.Date(2027, 3, 31, 0, 0, 0, 0, kolkata)},
		{"a billing day of 31 starts February's window on the 29th in a leap year", Calendar{Unit: CalendarMonth, Location: kolkata, Day: 31},
			time.Date(2028, 2, 29, 0, 0, 0, 0, kolkata), time.Date(2028, 2, 29, 0, 0, 0, 0, kolkata), time.Date(2028, 3, 31, 0, 0, 0, 0, kolkata)},
		{"a billing day of 30 in January", Calendar{Unit: CalendarMonth, Day: 30},
			time.Date(2027, 2, 10, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 30, 0, 0, 0, 0, time.UTC), time.Date(2027, 2, 28, 0, 0, 0, 0, time.UTC)},
		{"a week from Sunday 06:00", Calendar{Unit: CalendarWeek, Location: berlin, Day: 7, Start: 6 * time.Hour},
			time.Date(2026, 12, 6, 5, 59, 0, 0, berlin), time.Date(2026, 11, 29, 6, 0, 0, 0, berlin), time.Date(2026, 12, 6, 6, 0, 0, 0, berlin)},
		{"a year from February 29 starts on the 28th in a common year", Calendar{Unit: CalendarYear, Month: time.February, Day: 29},
			time.Date(2027, 6, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 2, 28, 0, 0, 0, 0, time.UTC), time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC)},
		{"a leap year is 366 days", Calendar{Unit: CalendarYear, Location: berlin},
			time.Date(2028, 7, 1, 0, 0, 0, 0, berlin), time.Date(2028, 1, 1, 0, 0, 0, 0, berlin), time.Date(2029, 1, 1, 0, 0, 0, 0, berlin)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := newCalendar(tc.c).compute(tc.at.UnixNano())
			if got.start != tc.start.UnixNano() || got.end != tc.end.UnixNano() {
				t.Errorf("%v at %v: window %v, want [%v, %v)", tc.c, tc.at, fmtSpan(tc.c, got), tc.start.In(tc.c.location()), tc.end.In(tc.c.location()))
			}
		})
	}
}

// TestCalendarLongest: the longest window is the unit's longest plus the
// zone's swing of offsets.
func TestCalendarLongest(t *testing.T) {
	for _, tc := range []struct {
		zone string
		unit Unit
		want time.Duration
	}{
		{"Europe/Berlin", CalendarDay, 25 * time.Hour},
		// +10 to +11:30 in 1981-1985, +10:30 to +11 since.
		{"Australia/Lord_Howe", CalendarDay, 25*time.Hour + 30*time.Minute},
		{"Asia/Kolkata", CalendarDay, 24 * time.Hour},
		{"UTC", CalendarMonth, 31 * 24 * time.Hour},
		{"America/New_York", CalendarYear, 366*24*time.Hour + time.Hour},
	} {
		c := Calendar{Unit: tc.unit, Location: mustZone(t, tc.zone)}
		if got := c.Longest(); got != tc.want {
			t.Errorf("%v: Longest() = %v, want %v", c, got, tc.want)
		}
	}
	// No window is longer.
	rapid.Check(t, func(t *rapid.T) {
		c := drawCalendar(t)
		s := newCalendar(c).compute(drawInstant(t, c))
		if l := time.Duration(s.end - s.start); l > c.Longest() {
			t.Fatalf("%v: window %v lasts %v, longer than Longest() %v", c, fmtSpan(c, s), l, c.Longest())
		}
	})
}

// TestCalendarRefused: the parameters a calendar refuses, by field.
func TestCalendarRefused(t *testing.T) {
	for _, tc := range []struct {
		name  Name
		p     Params
		field string
	}{
		{TokenBucketName, Params{Limit: 5, Calendar: Calendar{Unit: CalendarDay}}, "calendar"},
		{GCRAName, Params{Limit: 5, Calendar: Calendar{Unit: CalendarDay}}, "calendar"},
		{SlidingLogName, Params{Limit: 5, Calendar: Calendar{Unit: CalendarDay}}, "calendar"},
		{ConcurrencyName, Params{Limit: 5, Calendar: Calendar{Unit: CalendarDay}}, "calendar"},
		{FixedWindowName, Params{Limit: 5, Calendar: Calendar{Unit: "fortnight"}}, "calendar"},
		{FixedWindowName, Params{Limit: 5, Window: time.Hour, Calendar: Calendar{Unit: CalendarDay}}, "window"},
		{FixedWindowName, Params{Limit: 0, Calendar: Calendar{Unit: CalendarDay}}, "limit"},
		{FixedWindowName, Params{Limit: 5, Calendar: Calendar{Unit: CalendarDay, Day: 3}}, "anchor"},
		{FixedWindowName, Params{Limit: 5, Calendar: Calendar{Unit: CalendarDay, Start: 24 * time.Hour}}, "anchor"},
		{FixedWindowName, Params{Limit: 5, Calendar: Calendar{Unit: CalendarDay, Start: time.Second}}, "anchor"},
		{FixedWindowName, Params{Limit: 5, Calendar: Calendar{Unit: CalendarWeek, Day: 8}}, "anchor"},
		{FixedWindowName, Params{Limit: 5, Calendar: Calendar{Unit: CalendarMonth, Day: 32}}, "anchor"},
		{FixedWindowName, Params{Limit: 5, Calendar: Calendar{Unit: CalendarMonth, Month: 2}}, "anchor"},
		{SlidingCounterName, Params{Limit: 5, Calendar: Calendar{Unit: CalendarYear, Month: 2, Day: 30}}, "anchor"},
		{SlidingCounterName, Params{Limit: 5, Calendar: Calendar{Unit: CalendarYear, Month: 13}}, "anchor"},
	} {
		_, err := New(tc.name, tc.p)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Field != tc.field {
			t.Errorf("New(%s, %+v) = %v, want a ParamError on %q", tc.name, tc.p, err, tc.field)
		}
	}
}

// calModel is the brute-force model of a window algorithm over a
// calendar: every admitted request kept, the counts summed from them.
type calModel struct {
	c        Calendar
	capacity int64
	sliding  bool
	times    []int64
	costs    []int64
}

// sum returns the cost admitted within [from, to).
func (m *calModel) sum(from, to int64) int64 {
	n := int64(0)
	for i, t := range m.times {
		if from <= t && t < to {
			n += m.costs[i]
		}
	}
	return n
}

// used returns what the algorithm counts as spent at now, exactly: the
// window's count, plus for a sliding counter the previous window's
// weighted by the part of it a span of the current window's length
// ending at now still covers.
func (m *calModel) used(now int64) *big.Rat {
	s := modelSpan(m.c, now)
	u := new(big.Rat).SetInt64(m.sum(s.start, s.end))
	if m.sliding {
		l, lp := s.end-s.start, s.start-s.prev
		covered := min(lp, s.start-(now-l)) // [now-l, now) ∩ [prev, start)
		prev := new(big.Rat).SetFrac64(m.sum(s.prev, s.start), 1)
		u.Add(u, prev.Mul(prev, big.NewRat(covered, lp)))
	}
	return u
}

// allows reports whether a request of cost fits at now.
func (m *calModel) allows(now, cost int64) bool {
	u := m.used(now)
	return u.Add(u, big.NewRat(cost, 1)).Cmp(big.NewRat(m.capacity, 1)) <= 0
}

// TestCalendarAlgorithms: fixed_window and sliding_counter over a
// calendar decide as the brute-force model does, request by request, on
// traces that cross changes of offset, month ends and leap days; a denial's
// RetryAfter is exact (the request fits then, and not a nanosecond before),
// and an admission's Reset is when nothing is counted any more.
func TestCalendarAlgorithms(t *testing.T) {
	for _, name := range []Name{FixedWindowName, SlidingCounterName} {
		t.Run(string(name), func(t *testing.T) {
			n := 0
			rapid.Check(t, func(t *rapid.T) {
				if n++; raceEnabled && n > raceExamples {
					return
				}
				checkCalendarTrace(t, name)
			})
		})
	}
}

func checkCalendarTrace(t *rapid.T, name Name) {
	c := drawCalendar(t)
	p := Params{Limit: rapid.Int64Range(1, 6).Draw(t, "limit"), Calendar: c}
	a := MustNew(name, p)
	m := &calModel{c: c, capacity: p.Limit, sliding: name == SlidingCounterName}
	now := drawInstant(t, c)
	var (
		state []byte
		last  Decision
	)
	for i := range rapid.IntRange(1, 25).Draw(t, "steps") {
		if i > 0 {
			end := modelSpan(c, now).end
			switch rapid.IntRange(0, 6).Draw(t, "dt kind") {
			case 0:
				now = end
			case 1:
				now = end - 1
			case 2:
				if last.Allowed {
					now += int64(last.Reset)
				} else {
					now += int64(last.RetryAfter)
				}
			case 3:
				now += rapid.Int64Range(0, 3*3600e9).Draw(t, "dt")
			case 4:
				now += rapid.Int64Range(0, int64(c.Longest())*3/2).Draw(t, "dt")
			}
		}
		cost := rapid.Int64Range(1, p.Limit).Draw(t, "cost")
		call := fmt.Sprintf("%v, step %d at %v, cost %d", c, i, time.Unix(0, now).In(c.location()), cost)
		used := m.used(now)
		next, d := a.Step(state, now, cost)
		if want := m.allows(now, cost); d.Allowed != want {
			t.Fatalf("%s: Allowed %v, want %v (model counts %v of %d)", call, d.Allowed, want, used.FloatString(3), p.Limit)
		}
		left := new(big.Rat).Sub(big.NewRat(p.Limit, 1), used)
		if d.Allowed {
			left.Sub(left, big.NewRat(cost, 1))
		}
		if want := max(0, ratFloor(left)); d.Remaining != want {
			t.Fatalf("%s: Remaining %d, want %d", call, d.Remaining, want)
		}
		if d.Allowed {
			// The record is the window's own, whatever the calendar.
			if size := map[Name]int{FixedWindowName: codec.WindowSize, SlidingCounterName: codec.CounterSize}[name]; len(next) != size {
				t.Fatalf("%s: a record of %d bytes, want %d", call, len(next), size)
			}
			state = next
			m.times = append(m.times, now)
			m.costs = append(m.costs, cost)
			at := now + int64(d.Reset)
			if m.used(at).Sign() != 0 || m.used(at-1).Sign() == 0 {
				t.Fatalf("%s: Reset %v is not when the count falls to nothing", call, d.Reset)
			}
			if d.TTL != d.Reset {
				t.Fatalf("%s: TTL %v, Reset %v", call, d.TTL, d.Reset)
			}
		} else {
			at := now + int64(d.RetryAfter)
			if !m.allows(at, cost) || m.allows(at-1, cost) {
				t.Fatalf("%s: RetryAfter %v is not when the request first fits", call, d.RetryAfter)
			}
		}
		last = d
	}
}

func ratFloor(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for a positive denominator
	return q.Int64()
}

// TestCalendarMemoConcurrent: goroutines asking one calendar about
// instants of different windows at once each get their own instant's
// windows, whatever the memo holds (run under -race).
func TestCalendarMemoConcurrent(t *testing.T) {
	c := newCalendar(Calendar{Unit: CalendarDay, Location: mustZone(t, "America/New_York")})
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, c.loc).UnixNano() // a 25-hour day
	want := make([]windowSpan, 6)
	for i := range want {
		want[i] = c.compute(base + int64(i)*int64(13*time.Hour))
	}
	done := make(chan string, 4)
	for g := range 4 {
		go func() {
			for n := range 2000 {
				i := (n + g) % len(want)
				if got := c.span(base + int64(i)*int64(13*time.Hour)); got != want[i] {
					done <- fmt.Sprintf("instant %d: %v, want %v", i, got, want[i])
					return
				}
			}
			done <- ""
		}()
	}
	for range 4 {
		if msg := <-done; msg != "" {
			t.Error(msg)
		}
	}
}

// TestCalendarClockStepsBack: a clock that steps back over a calendar
// boundary stays in the later window, as with windows of one length:
// nothing spent there is handed back, and the reset is still the later
// window's end.
func TestCalendarClockStepsBack(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	cal := Calendar{Unit: CalendarMonth, Location: berlin}
	turn := time.Date(2026, 11, 1, 0, 0, 0, 0, berlin).UnixNano()
	end := time.Date(2026, 12, 1, 0, 0, 0, 0, berlin).UnixNano()
	for _, name := range []Name{FixedWindowName, SlidingCounterName} {
		a := MustNew(name, Params{Limit: 2, Calendar: cal})
		state, d := a.Step(nil, turn+int64(time.Minute), 2)
		if !d.Allowed {
			t.Fatalf("%s: the first request denied: %+v", name, d)
		}
		back := turn - int64(time.Hour) // October, an hour before the turn
		_, d = a.Step(state, back, 1)
		if d.Allowed || d.Remaining != 0 {
			t.Errorf("%s: an hour back into October: %+v, want November's spent count to stand", name, d)
		}
		if want := time.Duration(end - back); name == FixedWindowName && d.Reset != want {
			t.Errorf("%s: Reset %v, want November's end, %v away", name, d.Reset, want)
		}
	}
}

// TestCalendarExtremeInstants: a calendar step at the ends of the int64
// nanosecond range, where windows are cut short by the range, answers
// without panicking and with no negative duration.
func TestCalendarExtremeInstants(t *testing.T) {
	nows := []int64{math.MinInt64, math.MinInt64 + 1, -1, 0, math.MaxInt64 - 1, math.MaxInt64}
	for _, unit := range Units {
		for _, zone := range calendarZones {
			for _, name := range []Name{FixedWindowName, SlidingCounterName} {
				a := MustNew(name, Params{Limit: 3, Calendar: Calendar{Unit: unit, Location: mustZone(t, zone), Day: 31 * int(btoi(unit == CalendarMonth))}})
				var state []byte
				for _, now := range append(nows, nows...) {
					next, d := a.Step(state, now, 2)
					if d.RetryAfter < 0 || d.Reset < 0 || d.TTL < 0 || d.Remaining < 0 {
						t.Errorf("%s %s %s at %d: %+v", name, unit, zone, now, d)
					}
					if next != nil {
						state = next
					}
				}
			}
		}
	}
}

func btoi(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// FuzzStepCalendar runs the window algorithms over a calendar on arbitrary
// record bytes, times and costs: a step never panics, writes a record of
// its own algorithm when it admits and nothing when it denies, and says no
// negative duration.
func FuzzStepCalendar(f *testing.F) {
	for _, now := range []int64{1_700_000_000e9, math.MaxInt64, math.MinInt64, 0} {
		for _, state := range [][]byte{nil,
			codec.AppendWindow(nil, codec.Window{Start: math.MaxInt64, Count: math.MaxInt64}),
			codec.AppendCounter(nil, codec.Counter{Start: 1_699_999_999e9, Count: math.MaxInt64, Previous: math.MaxInt64}),
			codec.AppendCounter(nil, codec.Counter{Start: math.MinInt64, Count: 1, Previous: 1}),
		} {
			f.Add(uint8(0), uint8(2), state, now, int64(1))
			f.Add(uint8(1), uint8(5), state, now, int64(3))
		}
	}
	f.Fuzz(func(t *testing.T, which, zone uint8, state []byte, now, cost int64) {
		name := []Name{FixedWindowName, SlidingCounterName}[which%2]
		c := Calendar{Unit: Units[int(which/2)%len(Units)], Location: mustZone(t, calendarZones[int(zone)%len(calendarZones)]), Start: time.Duration(zone%24) * time.Hour}
		if c.Unit == CalendarMonth {
			c.Day = 1 + int(zone)%31
		}
		a := MustNew(name, Params{Limit: 3, Calendar: c})
		next, d := a.Step(bytes.Clone(state), now, cost)
		switch {
		case d.RetryAfter < 0 || d.Reset < 0 || d.TTL < 0 || d.Remaining < 0:
			t.Fatalf("%s over %v at %d: a negative figure in %+v", name, c, now, d)
		case d.Allowed && !written(name, next):
			t.Fatalf("%s over %v at %d: admitted, writing %x", name, c, now, next)
		case !d.Allowed && next != nil:
			t.Fatalf("%s over %v at %d: denied, writing %x", name, c, now, next)
		}
	})
}

// TestCalendarChangeCarries: a record a calendar writes always starts at
// one of its boundaries (so it is never read as another calendar's), and a
// fixed window's record carried into another calendar keeps at most what
// was spent, all of it when it started in the new window in progress.
func TestCalendarChangeCarries(t *testing.T) {
	n := 0
	rapid.Check(t, func(t *rapid.T) {
		if n++; raceEnabled && n > raceExamples {
			return
		}
		from, to := drawCalendar(t), drawCalendar(t)
		spent := drawInstant(t, from)
		later := spent + rapid.Int64Range(0, 40*24*3600).Draw(t, "seconds later")*1e9
		old := MustNew(FixedWindowName, Params{Limit: 100, Calendar: from}).(*FixedWindow)
		n := rapid.Int64Range(1, 99).Draw(t, "spent")
		rec, d := old.Step(nil, spent, n)
		s, err := codec.DecodeWindow(rec)
		if err != nil || !d.Allowed {
			t.Fatalf("spending %d under %v: %+v, %v", n, from, d, err)
		}
		if old.foreign(s.Start) {
			t.Fatalf("%v: its own record starting %v read as another calendar's", from, fmtSpan(from, old.cal.compute(s.Start)))
		}
		cur := MustNew(FixedWindowName, Params{Limit: 100, Calendar: to}).(*FixedWindow)
		next, d := cur.Step(rec, later, 1)
		if !d.Allowed {
			t.Fatalf("one more under %v: %+v", to, d)
		}
		c, err := codec.DecodeWindow(next)
		if err != nil {
			t.Fatal(err)
		}
		start, _ := cur.cal.bounds(later)
		carried := c.Count - 1
		switch {
		case carried < 0 || carried > n:
			t.Fatalf("%d spent under %v, carried %d into %v", n, from, carried, to)
		case s.Start >= start && c.Start == start && carried != n:
			t.Fatalf("%d spent under %v from %v, in the window in progress under %v: carried %d", n, from, s.Start, to, carried)
		case cur.foreign(c.Start):
			t.Fatalf("the record carried into %v starts off its boundaries", to)
		}
	})
}
