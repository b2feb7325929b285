package identity

import (
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
)

// A level's key within its tenant is shown as {TENANT}KEY, and read back
// from that form to the same key, whatever bytes the tenant's value holds
// (braces, '%', up to sluice.MaxAttrLen of them); two different pairs are
// never shown alike, nor like a key of no tenant.
func TestNestedKeyShownAndParsed(t *testing.T) {
	id, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	value := func(t *rapid.T, label string) string {
		b := rapid.SliceOfN(rapid.SampledFrom([]byte("{}%:7BDa/\x00é")), 1, sluice.MaxAttrLen).Draw(t, label)
		return string(b)
	}
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom([]string{"attr:", "header:"}).Draw(t, "kind")
		tenant := kind + value(t, "tenant")
		own := rapid.SampledFrom([]string{"user:", "attr:", "param:", "ip:192.0.2.1"}).Draw(t, "own")
		if !strings.HasPrefix(own, "ip:") {
			own += value(t, "own")
		}
		key := sluice.NestedKey(tenant, own)
		shown := ShowKey(key)
		back, err := id.ParseKey(shown)
		if err != nil || back != key {
			t.Fatalf("%q shown as %q reads back as %q, %v", key, shown, back, err)
		}
		other := sluice.NestedKey(kind+value(t, "tenant2"), own)
		if ShowKey(other) == shown != (other == key) {
			t.Fatalf("%q and %q are both shown as %q", key, other, shown)
		}
		if ShowKey(own) == shown || ShowKey(tenant) == shown {
			t.Fatalf("%q is shown as a key of no tenant, %q", key, shown)
		}
	})
	if got := ShowKey(sluice.NestedKey("attr:acme", "key:0123456789abcdef0123456789abcdef")); got != "{attr:acme}keyhash:0123456789abcdef0123456789abcdef" {
		t.Errorf("an API key within a tenant is shown as %q", got)
	}
	for _, bad := range []string{"{attr:acme", "{user:bob}user:alice", "{attr:a%zz}user:alice", "{attr:a{b}user:alice", "{attr:acme}", "{attr:acme}{attr:x}user:y", "{}user:alice"} {
		if k, err := id.ParseKey(bad); !errors.Is(err, ErrBadKey) {
			t.Errorf("ParseKey(%q) = %q, %v; want an ErrBadKey", bad, k, err)
		}
	}
}
