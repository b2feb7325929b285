package replay

import (
	"time"
)

// maxTime bounds the times read: 2200-01-01, so that every time and
// every sum of a time and a window fits an int64 of nanoseconds.
const maxTime = 7_258_118_400 * int64(1e9)

var months = [12]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// parseLocalTime reads nginx's $time_local and Apache's %t,
// "02/Jan/2006:15:04:05 -0700", into Unix nanoseconds.
func parseLocalTime(s string) (int64, bool) {
	// 02/Jan/2006:15:04:05 -0700
	if len(s) != 26 || s[2] != '/' || s[6] != '/' || s[11] != ':' || s[14] != ':' || s[17] != ':' || s[20] != ' ' {
		return 0, false
	}
	day, ok1 := digits(s[0:2])
	year, ok2 := digits(s[7:11])
	hour, ok3 := digits(s[12:14])
	minute, ok4 := digits(s[15:17])
	sec, ok5 := digits(s[18:20])
	zh, ok6 := digits(s[22:24])
	zm, ok7 := digits(s[24:26])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) {
		return 0, false
	}
	month := -1
	for i, m := range months {
		if s[3:6] == m {
			month = i
			break
		}
	}
	if month < 0 || day < 1 || day > 31 || hour > 23 || minute > 59 || sec > 60 || zm > 59 || year < 1970 || year >= 2200 {
		return 0, false
	}
	off := (zh*60 + zm) * 60
	switch s[21] {
	case '+':
	case '-':
		off = -off
	default:
		return 0, false
	}
	t := time.Date(year, time.Month(month+1), day, hour, minute, sec, 0, time.UTC)
	if t.Day() != day { // 31/Feb
		return 0, false
	}
	return t.Unix()*1e9 - int64(off)*1e9, true
}

// digits reads a run of decimal digits.
func digits(s string) (int, bool) {
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, s != ""
}

// parseSeconds reads a decimal number of seconds, "1700000000.123" (nginx's
// $msec) or "0.042" ($request_time), into nanoseconds, exactly (digits
// past the ninth decimal are dropped). Negative values and exponents are
// refused.
func parseSeconds(s string) (int64, bool) {
	intPart, frac := s, ""
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			intPart, frac = s[:i], s[i+1:]
			break
		}
	}
	if intPart == "" || len(intPart) > 10 {
		return 0, false
	}
	sec, ok := digits(intPart)
	if !ok {
		return 0, false
	}
	ns := int64(0)
	for i := 0; i < 9; i++ {
		ns *= 10
		if i < len(frac) {
			c := frac[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			ns += int64(c - '0')
		}
	}
	for i := 9; i < len(frac); i++ {
		if c := frac[i]; c < '0' || c > '9' {
			return 0, false
		}
	}
	if int64(sec) >= maxTime/1e9 {
		return 0, false
	}
	return int64(sec)*1e9 + ns, true
}

// parseAnyTime reads a time as JSON logs write them: RFC 3339 (with or
// without fractional seconds, as nginx's $time_iso8601 and most loggers
// write), the $time_local layout, or Unix seconds as a decimal string.
func parseAnyTime(s string) (int64, bool) {
	if ns, ok := parseSeconds(s); ok {
		return ns, true
	}
	if ns, ok := parseLocalTime(s); ok {
		return ns, true
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() < 1970 || t.Year() >= 2200 {
		return 0, false
	}
	return t.UnixNano(), true
}

// unixNumber reads a JSON number of Unix time: seconds with an optional
// fraction; an integer too large for seconds is read as milliseconds
// (over 1e11), microseconds (over 1e14) or nanoseconds (over 1e17).
func unixNumber(s string) (int64, bool) {
	ns, ok := parseSeconds(s)
	if ok {
		return ns, true
	}
	// An integer of more than 10 digits: a finer unit.
	n := int64(0)
	if len(s) > 19 || s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	switch {
	case n > 1e17:
	case n > 1e14:
		n *= 1e3
	default:
		n *= 1e6
	}
	if n < 0 || n >= maxTime {
		return 0, false
	}
	return n, true
}
