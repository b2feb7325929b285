package envoyrls_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/envoyrls"
)

// FuzzKeyField: a stored key's field is at most FieldSize bytes (at most
// KeptHashLen past MaxKeptValue, whatever the value), two values never
// share a field, and a metric label's value is bounded and stays UTF-8.
func FuzzKeyField(f *testing.F) {
	f.Add("a", "b")
	f.Add(strings.Repeat("x", envoyrls.MaxKeptValue), strings.Repeat("x", envoyrls.MaxKeptValue+1))
	f.Add("#0123456789abcdef0123456789abcdef", strings.Repeat("y", 100))
	f.Add(strings.Repeat("é", 40), strings.Repeat("é", 41))
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := envoyrls.AppendKeyField(nil, a), envoyrls.AppendKeyField(nil, b)
		if len(ka) > envoyrls.FieldSize(a) || len(a) > envoyrls.MaxKeptValue && len(ka) != envoyrls.KeptHashLen {
			t.Fatalf("field of %d bytes for a value of %d, bound %d", len(ka), len(a), envoyrls.FieldSize(a))
		}
		if a != b && string(ka) == string(kb) {
			t.Fatalf("values %q and %q share the field %q", a, b, ka)
		}
		l := envoyrls.BoundLabelValue(a)
		if len(l) > max(envoyrls.MaxLabelValue, 48+envoyrls.KeptHashLen) {
			t.Fatalf("label value of %d bytes", len(l))
		}
		if utf8.ValidString(a) && !utf8.ValidString(l) {
			t.Fatalf("label value %q of a UTF-8 value is not UTF-8", l)
		}
	})
}

// Keys built of fields tell their entries apart: two lists of entries,
// some values short and some hashed, have one key only if they are the
// same list.
func TestPropertyKeysDistinct(t *testing.T) {
	value := rapid.OneOf(rapid.StringN(0, 8, -1), rapid.StringMatching(`[ab#0-9:]{60,70}`))
	list := rapid.SliceOfN(value, 1, 6)
	key := func(vs []string) string {
		var b []byte
		for _, v := range vs {
			b = envoyrls.AppendKeyField(b, v)
		}
		return string(b)
	}
	rapid.Check(t, func(t *rapid.T) {
		a, b := list.Draw(t, "a"), list.Draw(t, "b")
		if key(a) == key(b) && strings.Join(a, "\x00") != strings.Join(b, "\x00") || len(a) != len(b) && key(a) == key(b) {
			t.Fatalf("%q and %q share key %q", a, b, key(a))
		}
	})
}
