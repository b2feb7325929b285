package backend_test

import (
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/backend"
)

// hostileKey draws a caller key of the bytes that trip encoders: braces,
// '%', NUL and the uvarint's continuation bytes, up to 300 bytes.
func hostileKey(t *rapid.T, label string) string {
	b := rapid.SliceOfN(rapid.SampledFrom([]byte{0, 1, 0x7f, 0x80, 0xff, '{', '}', '%', ':', '7', 'B', 'a', '/'}), 0, 300).Draw(t, label)
	return string(b)
}

// NestedKey is one-to-one, and SplitNested gives back what it was given;
// no key made otherwise than by NestedKey (none beginning with a NUL, and
// none whose length is not the shortest uvarint) splits, so a nested key
// never stands for an un-nested one.
func TestNestedKeyIsOneToOne(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		t1, o1 := hostileKey(t, "tenant1"), hostileKey(t, "own1")
		t2, o2 := hostileKey(t, "tenant2"), hostileKey(t, "own2")
		k1, k2 := backend.NestedKey(t1, o1), backend.NestedKey(t2, o2)
		if (k1 == k2) != (t1 == t2 && o1 == o2) {
			t.Fatalf("(%q, %q) → %q and (%q, %q) → %q", t1, o1, k1, t2, o2, k2)
		}
		if tt, oo, ok := backend.SplitNested(k1); !ok || tt != t1 || oo != o1 {
			t.Fatalf("%q splits into %q, %q, %v; want %q, %q", k1, tt, oo, ok, t1, o1)
		}
		if _, _, ok := backend.SplitNested([]byte(k1)); !ok || string(backend.AppendNested([]byte("x"), t1, o1)) != "x"+k1 {
			t.Fatalf("%q: SplitNested of its bytes or AppendNested disagrees with NestedKey", k1)
		}
		// Any other key that splits is NestedKey's of what it splits into.
		other := hostileKey(t, "other")
		if tt, oo, ok := backend.SplitNested(other); ok && (!strings.HasPrefix(other, "\x00") || backend.NestedKey(tt, oo) != other) {
			t.Fatalf("%q splits into %q, %q, which NestedKey makes into %q", other, tt, oo, backend.NestedKey(tt, oo))
		}
	})
	for _, k := range []string{"", "\x00", "user:alice", "\x00\x80\x00x", "\x00\x05abc", "\x00\x80"} {
		if tt, oo, ok := backend.SplitNested(k); ok {
			t.Errorf("%q split into %q, %q: it is no key NestedKey makes", k, tt, oo)
		}
	}
	if k := backend.NestedKey("", ""); k != "\x00\x00" {
		t.Errorf("NestedKey of nothing within nothing = %q", k)
	}
}
