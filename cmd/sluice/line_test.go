package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestParseSeconds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int64
		err  bool
	}{
		{"0", 0, false},
		{"-0", 0, false},
		{"0.0e7", 0, false},
		{"1", 1e9, false},
		{"1700000000.123", 1700000000123000000, false},
		{"1700000000.1234567891", 1700000000123456789, false},
		{"1700000000.1234567895", 1700000000123456790, false}, // a half rounds away from zero
		{"1700000000.12345678949999", 1700000000123456789, false},
		{"-1.5", -1500000000, false},
		{"-0.0000000005", -1, false},
		{"-0.00000000049", 0, false},
		{"0.00000000001", 0, false},
		{"1.5e3", 1500000000000, false},
		{"1.5E+3", 1500000000000, false},
		{"15e-1", 1500000000, false},
		{"1.700000000123e9", 1700000000123000000, false},
		{"17000000001234567891e-10", 1700000000123456789, false},
		{"5e-10", 1, false},
		{"-5e-10", -1, false},
		{"4.9e-10", 0, false},
		{"1e-99999999999999999999", 0, false},
		{"0e99999999999999999999", 0, false},
		{"9223372036.854775807", math.MaxInt64, false},
		{"9223372036.8547758074", math.MaxInt64, false},
		{"9223372036.8547758075", 0, true},
		{"9223372036.854775808", 0, true},
		{"-9223372036.854775808", math.MinInt64, false},
		{"-9223372036.854775809", 0, true},
		{"9223372037", 0, true},
		{"1e10", 0, true},
		{"1e99999999999999999999", 0, true},
		{"00", 0, true},
		{"01", 0, true},
		{"1.", 0, true},
		{".5", 0, true},
		{"+1", 0, true},
		{"1e", 0, true},
		{"1e+", 0, true},
		{"--1", 0, true},
		{"0x10", 0, true},
		{" 1", 0, true},
		{"", 0, true},
		{"NaN", 0, true},
	}
	for _, tt := range tests {
		got, err := parseSeconds(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("parseSeconds(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestAppendSeconds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ns   int64
		want string
	}{
		{0, "0"},
		{1, "0.000000001"},
		{200_000_000, "0.2"},
		{12_000_000_000, "12"},
		{1700000000123000000, "1700000000.123"},
		{-1_500_000_000, "-1.5"},
		{math.MaxInt64, "9223372036.854775807"},
		{math.MinInt64, "-9223372036.854775808"},
	}
	for _, tt := range tests {
		if got := string(appendSeconds(nil, tt.ns)); got != tt.want {
			t.Errorf("appendSeconds(%d) = %q, want %q", tt.ns, got, tt.want)
		}
	}
}

// Any nanosecond count, written as decimal seconds, parses back to itself,
// and so does the same value written with an exponent.
func TestSecondsRoundTrip(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		ns := rapid.Int64().Draw(t, "ns")
		s := string(appendSeconds(nil, ns))
		if got, err := parseSeconds(s); err != nil || got != ns {
			t.Fatalf("parseSeconds(%q) = %d, %v; want %d", s, got, err, ns)
		}
		// The same value as an integer count of nanoseconds times 1e-9,
		// moved by k places between the mantissa and the exponent.
		k := rapid.IntRange(-30, 30).Draw(t, "k")
		e := withExponent(ns, k)
		if got, err := parseSeconds(e); err != nil || got != ns {
			t.Fatalf("parseSeconds(%q) = %d, %v; want %d", e, got, err, ns)
		}
		// JSON's own rendering of the value as a float64 is parsed exactly:
		// the result is the float's decimal value rounded to the nanosecond.
		f := float64(ns) / 1e9
		js, _ := json.Marshal(f)
		want, inRange := oracleSeconds(string(js))
		got, err := parseSeconds(string(js))
		if inRange != (err == nil) || got != want {
			t.Fatalf("parseSeconds(%s) = %d, %v; want %d (in range %v)", js, got, err, want, inRange)
		}
	})
}

// withExponent writes ns×1e-9 seconds as a mantissa of ns's digits with
// the point moved k places and the exponent compensating.
func withExponent(ns int64, k int) string {
	u := uint64(ns)
	sign := ""
	if ns < 0 {
		sign, u = "-", -u
	}
	digits := strconv.FormatUint(u, 10)
	exp := -9
	if k > 0 && u != 0 { // append k zeros to the mantissa
		digits += strings.Repeat("0", k)
		exp -= k
	} else if k < 0 { // put a point k places from the end
		if -k >= len(digits) {
			digits = strings.Repeat("0", -k-len(digits)+1) + digits
		}
		digits = digits[:len(digits)+k] + "." + digits[len(digits)+k:]
		exp -= k
	}
	return sign + digits + "e" + strconv.Itoa(exp)
}

// oracleSeconds is parseSeconds computed with big.Rat: the value in
// nanoseconds rounded to the nearest integer, halves away from zero, and
// whether it fits in an int64.
func oracleSeconds(s string) (int64, bool) {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		panic("oracle: not a number: " + s)
	}
	r.Mul(r, big.NewRat(1e9, 1))
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if new(big.Int).Mul(new(big.Int).Abs(m), big.NewInt(2)).Cmp(r.Denom()) >= 0 {
		q.Add(q, big.NewInt(int64(r.Sign())))
	}
	if !q.IsInt64() {
		return 0, false
	}
	return q.Int64(), true
}

// parseSeconds agrees with exact rational arithmetic on any JSON number of
// moderate size.
func TestParseSecondsMatchesBigRat(t *testing.T) {
	t.Parallel()
	digits := rapid.StringMatching(`[0-9]{0,25}`)
	rapid.Check(t, func(t *rapid.T) {
		var b strings.Builder
		if rapid.Bool().Draw(t, "neg") {
			b.WriteByte('-')
		}
		whole := strings.TrimLeft(digits.Draw(t, "whole"), "0")
		if whole == "" {
			whole = "0"
		}
		b.WriteString(whole)
		if frac := digits.Draw(t, "frac"); frac != "" {
			b.WriteString("." + frac)
		}
		if rapid.Bool().Draw(t, "has exponent") {
			b.WriteString(rapid.SampledFrom([]string{"e", "E"}).Draw(t, "e"))
			b.WriteString(rapid.SampledFrom([]string{"", "+", "-"}).Draw(t, "exp sign"))
			b.WriteString(strconv.Itoa(rapid.IntRange(0, 40).Draw(t, "exp")))
		}
		s := b.String()
		want, inRange := oracleSeconds(s)
		got, err := parseSeconds(s)
		if !inRange {
			if !errors.Is(err, errTimeRange) {
				t.Fatalf("parseSeconds(%q) = %d, %v; want a range error", s, got, err)
			}
			return
		}
		if err != nil || got != want {
			t.Fatalf("parseSeconds(%q) = %d, %v; want %d", s, got, err, want)
		}
	})
}

func TestParseLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line string
		want traceLine
	}{
		{`{"t": 1, "key": "k"}`, traceLine{T: 1e9, Key: "k", Cost: 1}},
		{` { "cost" : 3 , "key" : "a\"b" , "t" : 2.5 } `, traceLine{T: 2.5e9, Key: `a"b`, Cost: 3}},
		{`{"t": 1, "key": "\u00e9\ud83d\ude00", "extra": {"nested": [1, 2]}}`, traceLine{T: 1e9, Key: "é😀", Cost: 1}},
		{`{"t": 1, "key": "k", "cost": -5}`, traceLine{T: 1e9, Key: "k", Cost: -5}},
		{`{"t": 1, "key": "k", "cost": -0}`, traceLine{T: 1e9, Key: "k", Cost: 0}},
		{`{"t": 1, "key": "k", "cost": 123456789012345678901234567890}`, traceLine{T: 1e9, Key: "k", Cost: math.MaxInt64}},
		{`{"t": 1, "key": "k", "cost": -123456789012345678901234567890}`, traceLine{T: 1e9, Key: "k", Cost: math.MinInt64}},
		{`{"t": 1, "t": 2, "key": "k"}`, traceLine{T: 2e9, Key: "k", Cost: 1}},            // the last of duplicate fields wins
		{`{"T": 5, "t": 1, "key": "k", "Cost": 9}`, traceLine{T: 1e9, Key: "k", Cost: 1}}, // names are case-sensitive
	}
	for _, tt := range tests {
		got, err := parseLine([]byte(tt.line), nil)
		if err != nil || got != tt.want {
			t.Errorf("parseLine(%s) = %+v, %v; want %+v", tt.line, got, err, tt.want)
		}
	}
}

// formatLine writes req as a trace line that parseLine reads back as req.
func formatLine(req traceLine) []byte {
	b := []byte(`{"t":`)
	b = appendSeconds(b, req.T)
	b = append(b, `,"key":`...)
	b = appendJSONString(b, req.Key)
	b = append(b, `,"cost":`...)
	b = strconv.AppendInt(b, req.Cost, 10)
	return append(b, '}')
}

func FuzzParseLine(f *testing.F) {
	// The seed corpus is testdata/fuzz/FuzzParseLine.
	fields := map[string]json.RawMessage{}
	f.Fuzz(func(t *testing.T, line []byte) {
		req, err := parseLine(line, nil)
		again, err2 := parseLine(line, fields) // with a reused scratch map
		if req != again || (err == nil) != (err2 == nil) {
			t.Fatalf("parseLine(%q) twice: %+v, %v then %+v, %v", line, req, err, again, err2)
		}
		if err != nil {
			return
		}
		if !json.Valid(line) {
			t.Fatalf("parseLine accepted invalid JSON %q", line)
		}
		out := formatLine(req)
		back, err := parseLine(out, fields)
		if err != nil || back != req {
			t.Fatalf("parseLine(%q) = %+v; formatted as %s it parses to %+v, %v", line, req, out, back, err)
		}
		if !json.Valid(out) || bytes.ContainsAny(out, "\n\r") {
			t.Fatalf("formatLine(%+v) = %q, not one line of valid JSON", req, out)
		}
	})
}

func TestAppendJSONString(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.String().Draw(t, "s") + string(rapid.SliceOf(rapid.Byte()).Draw(t, "raw bytes"))
		out := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("appendJSONString(%q) = %s: %v", s, out, err)
		}
		// Each invalid byte becomes U+FFFD, as in a conversion to runes.
		if want := string([]rune(s)); back != want {
			t.Fatalf("appendJSONString(%q) reads back as %q, want %q", s, back, want)
		}
	})
}
