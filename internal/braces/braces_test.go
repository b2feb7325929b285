package braces

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestRoundTrip: every string escapes to one holding no brace, and
// unescapes to itself; two strings never escape alike.
func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.StringOfN(rapid.SampledFrom([]rune{'%', '{', '}', '2', '5', '7', 'B', 'D', 'a', 0}), 0, 24, -1).Draw(t, "s")
		e := Escape(s)
		if strings.ContainsAny(e, "{}") {
			t.Fatalf("Escape(%q) = %q holds a brace", s, e)
		}
		if string(Append(nil, []byte(s))) != e {
			t.Fatalf("Append and Escape differ on %q", s)
		}
		back, ok := Unescape(e)
		if !ok || back != s {
			t.Fatalf("Unescape(Escape(%q)) = %q, %v", s, back, ok)
		}
	})
}

func TestUnescapeRefuses(t *testing.T) {
	for _, s := range []string{"{", "a}", "%", "%2", "%41", "%7b", "100%"} {
		if got, ok := Unescape(s); ok {
			t.Errorf("Unescape(%q) = %q, true; want refused", s, got)
		}
	}
}
