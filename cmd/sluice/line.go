package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sluice-go/sluice/internal/clip"
)

// traceLine is one request of a simulate trace.
type traceLine struct {
	T    int64  // the request's time, Unix nanoseconds
	Key  string // the caller
	Cost int64  // what the request spends
}

// maxTraceKey is the longest key a trace line may have, in bytes: far
// above any key a door makes (identity.MaxKeyLen), and a bound on what
// each answer, which names its key, echoes of the trace.
const maxTraceKey = 4096

// parseLine parses one trace line: a JSON object with a number "t" (Unix
// seconds, required), a string "key" (required, 1 to maxTraceKey bytes)
// and an integer "cost" (default 1). Other fields are ignored. A cost outside the int64 range
// saturates, so that the limiter, not the parser, refuses it.
//
// fields is scratch space reused between calls; it may be nil.
func parseLine(line []byte, fields map[string]json.RawMessage) (traceLine, error) {
	line = trimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		if err := json.Unmarshal(line, new(any)); err != nil {
			return traceLine{}, fmt.Errorf("invalid JSON: %w", err)
		}
		return traceLine{}, fmt.Errorf("want a JSON object, got %s", kind(line))
	}
	if fields == nil {
		fields = make(map[string]json.RawMessage, 4)
	}
	clear(fields)
	if err := json.Unmarshal(line, &fields); err != nil {
		return traceLine{}, fmt.Errorf("invalid JSON: %w", err)
	}
	req := traceLine{Cost: 1}
	raw, ok := fields["t"]
	if !ok {
		return traceLine{}, errors.New(`missing "t" (the request's time in Unix seconds)`)
	}
	if !isNumber(raw) {
		return traceLine{}, fmt.Errorf(`"t": want a number of seconds, got %s`, kind(raw))
	}
	t, err := parseSeconds(string(raw))
	if err != nil {
		return traceLine{}, fmt.Errorf(`"t": %w`, err)
	}
	req.T = t
	raw, ok = fields["key"]
	if !ok {
		return traceLine{}, errors.New(`missing "key" (the caller the request is counted under)`)
	}
	if len(raw) == 0 || raw[0] != '"' {
		return traceLine{}, fmt.Errorf(`"key": want a string, got %s`, kind(raw))
	}
	if err := json.Unmarshal(raw, &req.Key); err != nil {
		return traceLine{}, fmt.Errorf(`"key": %w`, err)
	}
	switch {
	case req.Key == "":
		return traceLine{}, errors.New(`"key": empty (every request is counted under a caller)`)
	case len(req.Key) > maxTraceKey:
		return traceLine{}, fmt.Errorf(`"key": %d bytes, over the %d a key may have`, len(req.Key), maxTraceKey)
	}
	if raw, ok := fields["cost"]; ok {
		if !isNumber(raw) {
			return traceLine{}, fmt.Errorf(`"cost": want an integer, got %s`, kind(raw))
		}
		c, err := parseInteger(string(raw))
		if err != nil {
			return traceLine{}, fmt.Errorf(`"cost": %w`, err)
		}
		req.Cost = c
	}
	return req, nil
}

// trimSpace removes JSON's whitespace (space, tab, CR, LF) from both ends
// of b.
func trimSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// isNumber reports whether raw, a valid JSON value, is a number.
func isNumber(raw []byte) bool {
	return len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9')
}

// kind names the JSON type of raw, a valid JSON value, for error messages,
// with the value itself when it is short.
func kind(raw []byte) string {
	name := "number"
	if len(raw) > 0 {
		switch raw[0] {
		case '"':
			name = "string"
		case '{':
			name = "object"
		case '[':
			name = "array"
		case 't', 'f':
			name = "boolean"
		case 'n':
			return "null"
		}
	}
	if len(raw) <= 32 {
		return name + " " + string(raw)
	}
	return name
}

// parseInteger parses the text of a JSON number that must be an integer
// literal (no fraction, no exponent), saturating outside the int64 range.
func parseInteger(s string) (int64, error) {
	neg, digits, frac, exp, ok := splitNumber(s)
	if !ok {
		return 0, fmt.Errorf("%s is not a JSON number", clip.Quote(s, 40))
	}
	if frac != "" || exp != "" {
		return 0, fmt.Errorf("want an integer, got number %s", clip.String(s, 40))
	}
	v, err := strconv.ParseUint(digits, 10, 64)
	switch {
	case err != nil || (!neg && v > math.MaxInt64):
		if neg {
			return math.MinInt64, nil
		}
		return math.MaxInt64, nil
	case neg && v >= 1<<63:
		return math.MinInt64, nil
	case neg:
		return -int64(v), nil
	}
	return int64(v), nil
}

// splitNumber splits the text of a JSON number into its sign, the digits
// before the point, the digits after it (without the point) and the
// exponent (without the e, with its sign if any). ok is false when s is not
// a JSON number.
func splitNumber(s string) (neg bool, whole, frac, exp string, ok bool) {
	i := 0
	if i < len(s) && s[i] == '-' {
		neg = true
		i++
	}
	start := i
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return false, "", "", "", false
	}
	whole = s[start:i]
	if i < len(s) && s[i] == '.' {
		i++
		start = i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == start {
			return false, "", "", "", false
		}
		frac = s[start:i]
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		start = i
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		digits := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == digits {
			return false, "", "", "", false
		}
		exp = s[start:i]
	}
	if i != len(s) {
		return false, "", "", "", false
	}
	return neg, whole, frac, exp, true
}

// errTimeRange is returned for a time outside what int64 nanoseconds hold
// (about the years 1678 to 2262).
var errTimeRange = errors.New("out of range: Unix nanoseconds must fit in an int64")

// parseSeconds converts the text of a JSON number of seconds to
// nanoseconds exactly, working on the decimal digits rather than through a
// float64: "1700000000.123" is 1700000000123000000. Digits beyond the ninth
// after the point round to the nearest nanosecond, halves away from zero.
// Exponents are handled on the digits too, so "1.5e3" is 1500000000000 and
// no exponent, however large, costs more than the length of the text.
func parseSeconds(s string) (int64, error) {
	neg, whole, frac, exp, ok := splitNumber(s)
	if !ok {
		return 0, fmt.Errorf("%s is not a JSON number", clip.Quote(s, 40))
	}
	// The value is digits × 10^shift nanoseconds.
	digits := whole + frac
	for len(digits) > 0 && digits[0] == '0' {
		digits = digits[1:]
	}
	if digits == "" {
		return 0, nil // zero, whatever its exponent
	}
	// An exponent beyond ±2^40 is clamped: the value is then far outside
	// the range, or far below half a nanosecond, whatever the digits (a
	// line is never 2^40 bytes long).
	const maxExp = 1 << 40
	var e int64
	if exp != "" {
		v, _ := strconv.ParseInt(exp, 10, 64) // saturates out of range
		e = max(-maxExp, min(v, maxExp))
	}
	shift := e - int64(len(frac)) + 9
	var (
		mag   uint64
		round bool
	)
	switch {
	case shift >= 0:
		if int64(len(digits))+shift > 19 {
			return 0, errTimeRange
		}
		mag, _ = strconv.ParseUint(digits, 10, 64) // at most 19 digits: fits
		for range shift {
			mag *= 10
		}
	case -shift > int64(len(digits)):
		// Below 0.1 ns: rounds to zero.
	default:
		keep := digits[:int64(len(digits))+shift]
		if len(keep) > 19 {
			return 0, errTimeRange
		}
		if keep != "" {
			mag, _ = strconv.ParseUint(keep, 10, 64)
		}
		round = digits[len(keep)] >= '5'
	}
	if round {
		mag++
	}
	if neg {
		if mag > 1<<63 {
			return 0, errTimeRange
		}
		return int64(-mag), nil // 1<<63 becomes MinInt64
	}
	if mag > math.MaxInt64 {
		return 0, errTimeRange
	}
	return int64(mag), nil
}

// appendSeconds appends ns nanoseconds as exact decimal seconds, with no
// trailing zeros after the point: 12000000000 is "12", 200000000 is "0.2".
func appendSeconds(dst []byte, ns int64) []byte {
	u := uint64(ns)
	if ns < 0 {
		dst = append(dst, '-')
		u = -u
	}
	dst = strconv.AppendUint(dst, u/uint64(time.Second), 10)
	frac := u % uint64(time.Second)
	if frac == 0 {
		return dst
	}
	var buf [9]byte
	for i := 8; i >= 0; i-- {
		buf[i] = byte('0' + frac%10)
		frac /= 10
	}
	n := 9
	for buf[n-1] == '0' {
		n--
	}
	dst = append(dst, '.')
	return append(dst, buf[:n]...)
}

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// as encoding/json does.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, "\ufffd"...)
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
		i++
	}
	return append(dst, '"')
}
