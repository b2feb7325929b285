package clip

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc… (4 bytes)"},
		{"abcd", 0, "… (4 bytes)"},
		{"abcd", -1, "… (4 bytes)"},
		{"aé", 2, "a… (3 bytes)"},         // é is two bytes: kept whole or left out
		{"a€b", 3, "a… (5 bytes)"},        // € is three
		{"a€b", 4, "a€… (5 bytes)"},       //
		{"a\xffb", 2, "a\xff… (3 bytes)"}, // an invalid byte is cut anywhere
		{strings.Repeat("x", 10_000_000), 5, "xxxxx… (10000000 bytes)"},
	} {
		if got := String(tc.s, tc.n); got != tc.want {
			t.Errorf("String(%.20q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestQuote(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"", 0, `""`},
		{"abc", 3, `"abc"`},
		{"abcd", 3, `"abc"… (4 bytes)`},
		{"a\nb", 4, `"a\nb"`},
		{"a\nb", 2, `"a"… (3 bytes)`}, // an escape is kept whole
		{"\xff\xfe", 4, `"\xff"… (2 bytes)`},
		{"日本", 3, `"日"… (6 bytes)`},
		{strings.Repeat("\x00", 1000), 12, `"\x00\x00\x00"… (1000 bytes)`},
	} {
		if got := Quote(tc.s, tc.n); got != tc.want {
			t.Errorf("Quote(%.20q, %d) = %s, want %s", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestDistinct(t *testing.T) {
	a := strings.Repeat("k", 300) + "a"
	b := strings.Repeat("k", 300) + "b"
	da, db := Distinct(a, 200), Distinct(b, 200)
	if da == db {
		t.Fatalf("Distinct of two values differing in their last byte are both %q", da)
	}
	if !strings.HasPrefix(da, strings.Repeat("k", 200)+"… (301 bytes, sha256 ") {
		t.Errorf("Distinct(a, 200) = %q", da)
	}
	if got := Distinct("short", 200); got != "short" {
		t.Errorf("Distinct(short) = %q", got)
	}
}

// checkBounds checks what every result promises for s and n.
func checkBounds(t interface{ Fatalf(string, ...any) }, s string, n int) {
	str, dis, quo := String(s, n), Distinct(s, n), Quote(s, n)
	bound := max(n, 0) + Overhead
	for name, r := range map[string]string{"String": str, "Distinct": dis, "Quote": quo} {
		if len(r) > bound {
			t.Fatalf("%s(%d bytes, %d) is %d bytes, over %d", name, len(s), n, len(r), bound)
		}
	}
	if len(s) <= max(n, 0) {
		if str != s || dis != s {
			t.Fatalf("a value within n is changed: %q %q", str, dis)
		}
	} else {
		h := Head(s, n)
		if !strings.HasPrefix(s, h) || len(h) > max(n, 0) || len(h) < n-utf8.UTFMax+1 {
			t.Fatalf("Head(%q, %d) = %q", s, n, h)
		}
		if utf8.ValidString(s) && !utf8.ValidString(h) {
			t.Fatalf("Head of valid UTF-8 %q is not: %q", s, h)
		}
		if str != h+Tail(s, false) || dis != h+Tail(s, true) {
			t.Fatalf("String or Distinct of a cut value: %q, %q", str, dis)
		}
		// A cut value reads longer than any uncut one.
		if len(dis) <= max(n, 0) {
			t.Fatalf("Distinct(%q, %d) = %q is not longer than %d", s, n, dis, n)
		}
	}
	if full := strconv.Quote(s); len(full) <= max(n, 0)+2 {
		if quo != full {
			t.Fatalf("Quote(%q, %d) = %s, want %s", s, n, quo, full)
		}
	} else {
		end := strings.LastIndex(quo, `"… (`)
		if end < 0 || !strings.HasSuffix(quo, Tail(s, false)) {
			t.Fatalf("Quote(%q, %d) = %s: no marker", s, n, quo)
		}
		head, err := strconv.Unquote(quo[:end+1])
		if err != nil || !strings.HasPrefix(s, head) {
			t.Fatalf("Quote(%q, %d) = %s: excerpt %q (%v) is not a prefix", s, n, quo, head, err)
		}
	}
}

// The bounds hold for any input and any excerpt length; an uncut value is
// shown as it is; a cut one shows a prefix and its length.
func TestBoundsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.OneOf(
			rapid.String(),
			rapid.StringOfN(rapid.Rune(), 0, 600, -1),
			rapid.Map(rapid.SliceOfN(rapid.Byte(), 0, 600), func(b []byte) string { return string(b) }),
		).Draw(t, "s")
		n := rapid.IntRange(-2, 300).Draw(t, "n")
		checkBounds(t, s, n)
	})
}

// Distinct values give distinct results, and a cut value never reads as an
// uncut one: a table of keys shown through Distinct stays one row per key.
func TestDistinctInjectiveProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 64).Draw(t, "n")
		base := rapid.StringN(0, 100, -1).Draw(t, "base")
		a := base + rapid.String().Draw(t, "a")
		b := base + rapid.String().Draw(t, "b")
		if a != b && Distinct(a, n) == Distinct(b, n) {
			t.Fatalf("Distinct(%q, %d) == Distinct(%q, %d) = %q", a, n, b, n, Distinct(a, n))
		}
	})
}

func FuzzClip(f *testing.F) {
	for _, s := range []string{"", "abc", "a\nb", "\xff\xfe\xfd", "日本語", strings.Repeat("€", 100), "\"\\", "a\u2028b"} {
		f.Add(s, 2)
		f.Add(s, 7)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		checkBounds(t, s, n%1000)
	})
}
