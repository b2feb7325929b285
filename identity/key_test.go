package identity

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
)

// checkKey checks what Key promises for one header value under scope:
// a key of at most MaxKeyLen bytes, or a bad identity error; a user key is
// the trimmed id itself, an API key its fixed-size hash.
func checkKey(t interface{ Fatalf(string, ...any) }, id *Identifier, scope sluice.Scope, v string) string {
	name := "X-User-Id"
	if scope == sluice.ScopeAPIKey {
		name = "X-Api-Key"
	}
	h := http.Header{name: {v}}
	key, err := id.Key(scope, "192.0.2.1:1", h)
	trimmed := trimOWS(v)
	switch {
	case err != nil:
		if !errors.Is(err, ErrIdentityTooLong) || len(trimmed) <= MaxUserIDLen && scope == sluice.ScopeUser || len(trimmed) <= MaxAPIKeyLen && scope == sluice.ScopeAPIKey {
			t.Fatalf("Key(%s, %d bytes) = %v, want a key", scope, len(v), err)
		}
		if len(err.Error()) > 200 {
			t.Fatalf("the error of a %d-byte value is %d bytes", len(v), len(err.Error()))
		}
		return ""
	case len(key) > MaxKeyLen:
		t.Fatalf("Key(%s, %d bytes) is %d bytes, over MaxKeyLen %d", scope, len(v), len(key), MaxKeyLen)
	case trimmed == "":
		if key != "ip:192.0.2.1" {
			t.Fatalf("Key(%s, %q) = %q, want the IP key", scope, v, key)
		}
	case scope == sluice.ScopeUser && key != "user:"+trimmed:
		t.Fatalf("Key(user, %q) = %q", v, key)
	case scope == sluice.ScopeAPIKey && (len(key) != 36 || !strings.HasPrefix(key, "key:")):
		t.Fatalf("Key(api_key, %d bytes) = %q, want key: and 32 hex digits", len(v), key)
	}
	return key
}

// Whatever the value and its length, a caller key is at most MaxKeyLen
// bytes or the identity is refused; two distinct identities never share a
// key.
func TestKeyBoundedAndDistinctProperty(t *testing.T) {
	id, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	value := rapid.Custom(func(t *rapid.T) string {
		n := rapid.OneOf(rapid.IntRange(0, 40), rapid.IntRange(MaxUserIDLen-2, MaxUserIDLen+2),
			rapid.IntRange(MaxAPIKeyLen-2, MaxAPIKeyLen+2), rapid.IntRange(0, 3*MaxAPIKeyLen)).Draw(t, "n")
		prefix := rapid.StringMatching(`[a-z0-9]{0,8}`).Draw(t, "prefix")
		fill := rapid.SampledFrom([]string{"a", "é", "\x00", "\xff"}).Draw(t, "fill")
		s := prefix + strings.Repeat(fill, n)
		return s[:min(len(s), n)]
	})
	rapid.Check(t, func(t *rapid.T) {
		scope := rapid.SampledFrom([]sluice.Scope{sluice.ScopeUser, sluice.ScopeAPIKey}).Draw(t, "scope")
		a, b := value.Draw(t, "a"), value.Draw(t, "b")
		ka, kb := checkKey(t, id, scope, a), checkKey(t, id, scope, b)
		if ka != "" && kb != "" && trimOWS(a) != "" && trimOWS(a) != trimOWS(b) && ka == kb {
			t.Fatalf("two identities share the key %q: %q and %q", ka, a, b)
		}
	})
}

func FuzzKey(f *testing.F) {
	id, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(false, "alice")
	f.Add(true, "sk-123")
	f.Add(false, strings.Repeat("u", MaxUserIDLen+1))
	f.Add(true, strings.Repeat("k", MaxAPIKeyLen+1))
	f.Add(false, " \t ")
	f.Fuzz(func(t *testing.T, apiKey bool, v string) {
		scope := sluice.ScopeUser
		if apiKey {
			scope = sluice.ScopeAPIKey
		}
		checkKey(t, id, scope, v)
	})
}
