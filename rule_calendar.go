package sluice

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice/algo"
)

// A calendar rule's windows follow the calendar of a time zone (package
// algo's Calendar) instead of whole multiples of a window length: the
// Rule's Calendar names the unit, Timezone the zone and Anchor where each
// window starts. Anchor's form depends on the unit:
//
//	day    "06:00"                    the time each day starts
//	week   "monday" or "sunday 06:00" the weekday (and time) each week starts
//	month  "15" or "15 06:00"         the billing day (and time) of the month
//	year   "04-06" or "04-06 06:00"   the month-day (and time) each year starts
//
// An empty anchor starts a window at midnight of the first day (Monday for
// a week, the 1st for a month, January 1 for a year). A billing day of 29
// to 31 starts a short month's window on its last day (the 28th or 29th of
// February, the 30th of a 30-day month).

// calendar returns the algo.Calendar of r's Calendar, Timezone and
// Anchor: the zero Calendar when r names none.
func (r Rule) calendar() (algo.Calendar, error) {
	if r.Calendar == "" {
		switch {
		case r.Timezone != "":
			return algo.Calendar{}, r.fail("timezone", "only a rule with a calendar takes a time zone; add calendar: day, week, month or year")
		case r.Anchor != "":
			return algo.Calendar{}, r.fail("anchor", "only a rule with a calendar takes an anchor; add calendar: day, week, month or year")
		}
		return algo.Calendar{}, nil
	}
	c := algo.Calendar{Unit: algo.Unit(r.Calendar)}
	switch c.Unit {
	case algo.CalendarDay, algo.CalendarWeek, algo.CalendarMonth, algo.CalendarYear:
	default:
		return c, r.fail("calendar", "must be one of %v, got %q", algo.Units, r.Calendar)
	}
	switch r.Algorithm {
	case algo.FixedWindowName, algo.SlidingCounterName:
	default:
		return c, r.fail("calendar", "only fixed_window and sliding_counter follow a calendar, not %s", r.Algorithm)
	}
	if r.Window != 0 {
		return c, r.fail("window", "a calendar rule's window is its calendar's %s; leave window out, got %v", r.Calendar, r.Window)
	}
	loc, err := loadZone(r.Timezone)
	if err != nil {
		return c, r.fail("timezone", "%v", err)
	}
	c.Location = loc
	if err := parseAnchor(&c, r.Anchor); err != nil {
		return c, r.fail("anchor", "%v", err)
	}
	return c, nil
}

// loadZone returns the IANA time zone named name; UTC for "".
func loadZone(name string) (*time.Location, error) {
	switch name {
	case "":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("name a zone, such as Europe/Berlin: Local is each host's own")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q: want an IANA name such as Europe/Berlin or America/New_York", name)
	}
	return loc, nil
}

// anchorForms says, per unit, what an anchor looks like.
var anchorForms = map[algo.Unit]string{
	algo.CalendarDay:   `the time a day starts, "06:00"`,
	algo.CalendarWeek:  `the weekday a week starts, "monday", and its time, "monday 06:00"`,
	algo.CalendarMonth: `the day of the month 1 to 31, "15", and its time, "15 06:00"`,
	algo.CalendarYear:  `the month and day a year starts, "04-06", and its time, "04-06 06:00"`,
}

// parseAnchor sets c's Day, Month and Start from the anchor s.
func parseAnchor(c *algo.Calendar, s string) error {
	if s == "" {
		return nil
	}
	bad := func() error { return fmt.Errorf("want %s, got %q", anchorForms[c.Unit], s) }
	day, clock := "", ""
	switch fields := strings.Fields(s); {
	case c.Unit == algo.CalendarDay && len(fields) == 1:
		clock = fields[0]
	case c.Unit != algo.CalendarDay && len(fields) == 1:
		day = fields[0]
	case c.Unit != algo.CalendarDay && len(fields) == 2:
		day, clock = fields[0], fields[1]
	default:
		return bad()
	}
	if clock != "" {
		hh, mm, ok := strings.Cut(clock, ":")
		h, err1 := strconv.Atoi(hh)
		m, err2 := strconv.Atoi(mm)
		if !ok || err1 != nil || err2 != nil || len(mm) != 2 || h < 0 || h > 23 || m < 0 || m > 59 {
			return bad()
		}
		c.Start = time.Duration(h)*time.Hour + time.Duration(m)*time.Minute
	}
	switch c.Unit {
	case algo.CalendarWeek:
		d, ok := weekdays[strings.ToLower(day)]
		if !ok {
			return bad()
		}
		c.Day = d
	case algo.CalendarMonth:
		d, err := strconv.Atoi(day)
		if err != nil || d < 1 || d > 31 {
			return bad()
		}
		c.Day = d
	case algo.CalendarYear:
		mm, dd, ok := strings.Cut(day, "-")
		m, err1 := strconv.Atoi(mm)
		d, err2 := strconv.Atoi(dd)
		if !ok || err1 != nil || err2 != nil || m < 1 || m > 12 || d < 1 {
			return bad()
		}
		c.Month, c.Day = time.Month(m), d
		if last := time.Date(2000, c.Month+1, 0, 0, 0, 0, 0, time.UTC).Day(); d > last {
			return fmt.Errorf("%s has no day %d, got %q", c.Month, d, s)
		}
	}
	return nil
}

// weekdays maps the names an anchor may give a weekday to ISO 8601's
// numbers (algo.Calendar.Day): 1 Monday to 7 Sunday.
var weekdays = map[string]int{
	"monday": 1, "mon": 1, "tuesday": 2, "tue": 2, "wednesday": 3, "wed": 3,
	"thursday": 4, "thu": 4, "friday": 5, "fri": 5, "saturday": 6, "sat": 6, "sunday": 7, "sun": 7,
}

// Per returns what the rule's Limit is counted per, for people: "1m0s",
// or for a calendar rule "month in Europe/Berlin from day 15".
func (c *CompiledRule) Per() string {
	if a := c.limit.Algorithm; a != nil && !a.Params().Calendar.IsZero() {
		return a.Params().Calendar.String()
	}
	return c.rule.Window.String()
}
