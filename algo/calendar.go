package algo

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Unit is the length of a calendar window.
type Unit string

// The calendar units.
const (
	CalendarDay   Unit = "day"
	CalendarWeek  Unit = "week"
	CalendarMonth Unit = "month"
	CalendarYear  Unit = "year"
)

// Units lists every Unit, in a stable order.
var Units = []Unit{CalendarDay, CalendarWeek, CalendarMonth, CalendarYear}

// Calendar aligns a window algorithm's windows to the calendar of a time
// zone rather than to whole multiples of a window length: a day, a week, a
// month or a year as the zone's clocks read it, starting at an anchor (the
// day of the month a billing period starts, the time of day a day starts).
// The zero Calendar (Unit empty) means no calendar.
//
// A window starts at the first instant at which the zone's wall clock
// reads its anchor or later. A day is therefore 23 or 25 hours long across
// a change to or from daylight saving time (23.5 or 24.5 on Lord Howe
// Island), a month 28 to 31 days, a year 365 or 366. An anchor that falls
// in the hour a change skips (02:30 on the day Berlin moves from 02:00 to
// 03:00) starts the window at the change (03:00); one that falls in the
// hour a change repeats starts it at the first of the two.
//
// Only fixed_window and sliding_counter take a calendar (Params.Calendar).
type Calendar struct {
	// Unit is the window's length: CalendarDay, CalendarWeek,
	// CalendarMonth or CalendarYear. Empty means no calendar.
	Unit Unit
	// Location is the time zone whose calendar the windows follow. Nil
	// means UTC. A program that loads zones by name (time.LoadLocation)
	// should import _ "time/tzdata" so that it finds them where the
	// system has no zone database, as in a container built from scratch.
	Location *time.Location
	// Month is, for CalendarYear, the month the year starts in. Zero
	// means January; refused for the other units.
	Month time.Month
	// Day is, for CalendarWeek, the weekday a week starts on, ISO 8601's
	// numbering: 1 Monday to 7 Sunday; zero means Monday. For
	// CalendarMonth and CalendarYear it is the day of the month the window
	// starts on (the billing day), 1 to 31; zero means 1. A day past the
	// end of a short month (29 to 31) starts that month's window on its
	// last day: a billing day of 31 starts February's window on the 28th,
	// or the 29th in a leap year, and March's on the 31st. Refused for
	// CalendarDay.
	Day int
	// Start is the time of day, on the zone's clocks, at which a window
	// starts: 6*time.Hour starts each day at 06:00. Zero means midnight;
	// it must be a whole number of minutes under 24 hours.
	Start time.Duration
}

// IsZero reports whether c is the zero Calendar: no calendar.
func (c Calendar) IsZero() bool { return c == Calendar{} }

// String returns c as "month in Europe/Berlin from day 15 at 06:00", the
// parts at their defaults left out.
func (c Calendar) String() string {
	if c.IsZero() {
		return ""
	}
	s := string(c.Unit) + " in " + c.location().String()
	switch c.Unit {
	case CalendarWeek:
		s += " from " + isoWeekday(c.weekday()).String()
	case CalendarMonth:
		s += fmt.Sprintf(" from day %d", c.day())
	case CalendarYear:
		s += fmt.Sprintf(" from %s %d", c.month(), c.day())
	}
	if c.Start != 0 {
		s += fmt.Sprintf(" at %02d:%02d", int(c.Start/time.Hour), int(c.Start%time.Hour/time.Minute))
	}
	return s
}

// check returns the ParamError of the first thing wrong with c.
func (c Calendar) check() error {
	switch c.Unit {
	case CalendarDay, CalendarWeek, CalendarMonth, CalendarYear:
	default:
		return &ParamError{"calendar", fmt.Sprintf("must be one of %v, got %q", Units, c.Unit)}
	}
	switch {
	case c.Start < 0 || c.Start >= 24*time.Hour || c.Start%time.Minute != 0:
		return &ParamError{"anchor", fmt.Sprintf("the time a window starts must be whole minutes from 00:00 to 23:59, got %v", c.Start)}
	case c.Month != 0 && c.Unit != CalendarYear:
		return &ParamError{"anchor", fmt.Sprintf("only a year takes a month to start in, not a %s", c.Unit)}
	case c.Month < 0 || c.Month > 12:
		return &ParamError{"anchor", fmt.Sprintf("the month a year starts in must be 1 to 12, got %d", c.Month)}
	case c.Day != 0 && c.Unit == CalendarDay:
		return &ParamError{"anchor", "a day takes the time it starts only, not a day"}
	case c.Unit == CalendarWeek && (c.Day < 0 || c.Day > 7):
		return &ParamError{"anchor", fmt.Sprintf("the weekday a week starts on must be 1 (Monday) to 7 (Sunday), got %d", c.Day)}
	case c.Day < 0 || c.Day > 31:
		return &ParamError{"anchor", fmt.Sprintf("the day a %s starts on must be 1 to 31, got %d", c.Unit, c.Day)}
	case c.Unit == CalendarYear && c.Day > daysIn(2000, c.month()):
		return &ParamError{"anchor", fmt.Sprintf("%s has no day %d", c.month(), c.Day)}
	}
	return nil
}

func (c Calendar) location() *time.Location {
	if c.Location == nil {
		return time.UTC
	}
	return c.Location
}

func (c Calendar) day() int { return max(c.Day, 1) }

func (c Calendar) month() time.Month { return max(c.Month, time.January) }

// weekday returns the ISO weekday a week starts on: 1 Monday to 7 Sunday.
func (c Calendar) weekday() int { return c.day() }

// isoWeekday converts an ISO weekday (1 Monday to 7 Sunday) to Go's.
func isoWeekday(d int) time.Weekday { return time.Weekday(d % 7) }

// Longest returns the longest a window of c can be: the unit's longest
// calendar length (24 hours, 7 days, 31 days, 366 days) plus the widest
// swing of c's zone's offset from UTC from 1970 to 2100 (an hour where
// clocks go forward an hour in summer, none in UTC). It is the window
// RateLimit-Policy states for a calendar rule (see Quota).
func (c Calendar) Longest() time.Duration {
	var n time.Duration
	switch c.Unit {
	case CalendarDay:
		n = 24 * time.Hour
	case CalendarWeek:
		n = 7 * 24 * time.Hour
	case CalendarMonth:
		n = 31 * 24 * time.Hour
	case CalendarYear:
		n = 366 * 24 * time.Hour
	}
	return n + offsetSwing(c.location())
}

// offsetSwing returns the largest offset of loc from UTC less the
// smallest, from 1970 to 2100, sampled daily.
func offsetSwing(loc *time.Location) time.Duration {
	// Worked out once per zone name: a rule compiled again on every reload
	// and for every override of it asks each time.
	if d, ok := swings.Load(loc.String()); ok {
		return d.(time.Duration)
	}
	d := scanSwing(loc)
	swings.Store(loc.String(), d)
	return d
}

// swings holds offsetSwing's answers by zone name.
var swings sync.Map

// scanSwing is offsetSwing without the memo.
func scanSwing(loc *time.Location) time.Duration {
	// A day apart: every offset of a zone lasts longer than a day.
	lo, hi := int64(0), int64(0)
	for t := int64(0); t < 4102444800; t += 86400 {
		off := offsetAt(loc, t)
		if t == 0 {
			lo, hi = off, off
		}
		lo, hi = min(lo, off), max(hi, off)
	}
	return time.Duration(hi-lo) * time.Second
}

// windowSpan is the window holding an instant, with its neighbours' ends,
// in Unix nanoseconds: the previous window is [prev, start), the current
// [start, end), the next [end, next).
type windowSpan struct {
	prev, start, end, next int64
}

// calendar is a Calendar compiled for the algorithms: the window of the
// last instant asked about is kept, so that the steps of one window find it
// with two comparisons. It is safe for concurrent use.
type calendar struct {
	Calendar
	loc  *time.Location
	last atomic.Pointer[windowSpan] // the span of the last instant looked up
}

func newCalendar(c Calendar) *calendar {
	return &calendar{Calendar: c, loc: c.location()}
}

// span returns the windows around the instant now (Unix nanoseconds).
func (c *calendar) span(now int64) windowSpan {
	if s := c.last.Load(); s != nil && s.start <= now && now < s.end {
		return *s
	}
	s := c.compute(now)
	c.last.Store(&s)
	return s
}

// bounds returns the window holding now: [start, end).
func (c *calendar) bounds(now int64) (start, end int64) {
	s := c.span(now)
	return s.start, s.end
}

// compute returns the windows around now, without the cache.
func (c *calendar) compute(now int64) windowSpan {
	sec := now / 1e9
	if now%1e9 < 0 {
		sec--
	}
	label := c.labelOf(time.Unix(sec, 0).In(c.loc))
	start := c.startOf(label)
	if start > sec {
		label = c.prevLabel(label)
		start = c.startOf(label)
	}
	end := c.startOf(c.nextLabel(label))
	if end <= sec {
		label = c.nextLabel(label)
		start, end = end, c.startOf(c.nextLabel(label))
	}
	prev := c.startOf(c.prevLabel(label))
	next := c.startOf(c.nextLabel(c.nextLabel(label)))
	return windowSpan{prev: nanos(prev), start: nanos(start), end: nanos(end), next: nanos(next)}
}

// nanos converts Unix seconds to nanoseconds, saturating.
func nanos(sec int64) int64 {
	switch {
	case sec > math.MaxInt64/int64(time.Second):
		return math.MaxInt64
	case sec < math.MinInt64/int64(time.Second):
		return math.MinInt64
	}
	return sec * 1e9
}

// A label numbers a window: for a day or a week, the civil day number
// (days from 1970-01-01) of its first day; for a month, year·12 + month-1;
// for a year, the year. Consecutive windows have consecutive labels (a
// week's differ by 7).

// labelOf returns the label of the window whose anchor the wall clock t
// (in c's zone) has most recently read: the window holding t, but for the
// hour around a change of offset, which compute corrects.
func (c *calendar) labelOf(t time.Time) int64 {
	y, m, d := t.Date()
	tod := time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute +
		time.Duration(t.Second())*time.Second
	switch c.Unit {
	case CalendarDay, CalendarWeek:
		dn := dayNumber(y, m, d)
		if tod < c.Start {
			dn--
		}
		if c.Unit == CalendarWeek {
			wd := int64(weekdayOf(dn)) // 0 Sunday
			first := int64(isoWeekday(c.weekday()))
			dn -= (wd - first + 7) % 7
		}
		return dn
	case CalendarMonth:
		if ad := min(c.day(), daysIn(y, m)); d < ad || d == ad && tod < c.Start {
			m--
		}
		return int64(y)*12 + int64(m) - 1
	default: // CalendarYear
		am := c.month()
		ad := min(c.day(), daysIn(y, am))
		if m < am || m == am && (d < ad || d == ad && tod < c.Start) {
			y--
		}
		return int64(y)
	}
}

func (c *calendar) prevLabel(l int64) int64 {
	if c.Unit == CalendarWeek {
		return l - 7
	}
	return l - 1
}

func (c *calendar) nextLabel(l int64) int64 {
	if c.Unit == CalendarWeek {
		return l + 7
	}
	return l + 1
}

// startOf returns the first instant (Unix seconds) of the window labelled
// l: the first at which c's zone's wall clock reads its anchor or later.
func (c *calendar) startOf(l int64) int64 {
	var wall int64 // the anchor's wall-clock reading, as seconds in UTC
	switch c.Unit {
	case CalendarDay, CalendarWeek:
		wall = l * 86400
	case CalendarMonth:
		y, m := int(civilDiv(l, 12)), time.Month(l-civilDiv(l, 12)*12+1)
		wall = dayNumber(y, m, min(c.day(), daysIn(y, m))) * 86400
	default:
		y, m := int(l), c.month()
		wall = dayNumber(y, m, min(c.day(), daysIn(y, m))) * 86400
	}
	return firstAtOrAfter(c.loc, wall+int64(c.Start/time.Second))
}

// firstAtOrAfter returns the first instant (Unix seconds) at which loc's
// wall clock reads wall (seconds, as if in UTC) or later. Where loc's
// clocks skip wall, that is the instant they skip it; where they read it
// twice, the first.
//
// It asks loc only for offsets (time.Time.Zone), not for the periods
// around them: time.Time.ZoneBounds misplaces the end of a leap year past
// the zone's last listed change (its end of 2040 in Berlin is a day early).
func firstAtOrAfter(loc *time.Location, wall int64) int64 {
	// The clocks read wall at wall-off, for an offset off in effect then:
	// at most 14 hours from wall, where the offsets of the instants a
	// twelve hours apart around it are all those in effect (a zone changes
	// at most twice a day).
	var offs [5]int64
	found, first := false, int64(0)
	for i := range offs {
		offs[i] = offsetAt(loc, wall+int64(i-2)*12*3600)
		if at := wall - offs[i]; offsetAt(loc, at) == offs[i] && (!found || at < first) {
			found, first = true, at
		}
	}
	if found {
		return first
	}
	// The clocks skip wall: they read less before some instant and more
	// from it on. Find it by bisection between an instant reading less
	// and one reading more.
	lo, hi := wall-slices.Max(offs[:]), wall-slices.Min(offs[:])
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if mid+offsetAt(loc, mid) >= wall {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// offsetAt returns loc's offset from UTC, in seconds, at the instant t
// (Unix seconds).
func offsetAt(loc *time.Location, t int64) int64 {
	_, off := time.Unix(t, 0).In(loc).Zone()
	return int64(off)
}

// dayNumber returns the days from 1970-01-01 to y-m-d of the proleptic
// Gregorian calendar.
func dayNumber(y int, m time.Month, d int) int64 {
	// Howard Hinnant's days_from_civil.
	yy := int64(y)
	if m <= 2 {
		yy--
	}
	era := civilDiv(yy, 400)
	yoe := yy - era*400
	mp := (int64(m) + 9) % 12
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// weekdayOf returns the weekday of the civil day number dn.
func weekdayOf(dn int64) time.Weekday {
	return time.Weekday((dn%7 + 7 + 4) % 7) // 1970-01-01 was a Thursday
}

// daysIn returns the number of days in month m of year y.
func daysIn(y int, m time.Month) int {
	switch m {
	case time.February:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}

// civilDiv is floor(a/b) for b > 0.
func civilDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// validateCalendar validates the parameters of an algorithm whose windows
// follow p.Calendar.
func validateCalendar(name Name, p Params) error {
	switch {
	case name != FixedWindowName && name != SlidingCounterName:
		return &ParamError{"calendar", fmt.Sprintf("only fixed_window and sliding_counter follow a calendar, not %s", name)}
	case p.Window != 0:
		return &ParamError{"window", fmt.Sprintf("a calendar window's length is the calendar's; got %v beside the calendar %s", p.Window, p.Calendar.Unit)}
	case p.Limit <= 0:
		return &ParamError{"limit", fmt.Sprintf("must be positive, got %d", p.Limit)}
	case p.Limit > MaxLimit:
		return &ParamError{"limit", fmt.Sprintf("must be at most %d, got %d", MaxLimit, p.Limit)}
	case p.Burst != 0:
		return &ParamError{"burst", fmt.Sprintf("%s does not take a burst (only token_bucket, leaky_bucket and gcra do)", name)}
	}
	return p.Calendar.check()
}

// WindowOf returns the window of a, a fixed_window or sliding_counter,
// holding the instant t (Unix nanoseconds): [start, end), by its calendar
// or in whole windows from the epoch. ok is false for the other algorithms.
func WindowOf(a Algorithm, t int64) (start, end int64, ok bool) {
	var r *rate
	switch a := a.(type) {
	case *FixedWindow:
		r = &a.rate
	case *SlidingCounter:
		r = &a.rate
	default:
		return 0, 0, false
	}
	s := r.span(t)
	return s.start, s.end, true
}
