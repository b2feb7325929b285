package identity

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
)

// A header scope is believed from a trusted proxy only, as the plan
// header is, whatever HeadersFromTrustedProxiesOnly says; missing or
// untrusted, the caller is counted by IP.
func TestHeaderScopeKey(t *testing.T) {
	scope := sluice.ScopeHeader("X-Org-Id")
	for _, only := range []bool{false, true} {
		id := newTestIdentifier(t, Config{HeadersFromTrustedProxiesOnly: only})
		for _, tt := range []struct {
			remote string
			h      http.Header
			want   string
			err    error
		}{
			{"10.0.0.1:1", http.Header{"X-Org-Id": {" acme "}, "X-Forwarded-For": {"203.0.113.9"}}, "header:acme", nil},
			{"203.0.113.5:1", http.Header{"X-Org-Id": {"acme"}}, "ip:203.0.113.5", nil},
			{"10.0.0.1:1", http.Header{"X-Forwarded-For": {"203.0.113.9"}}, "ip:203.0.113.9", nil},
			{"10.0.0.1:1", http.Header{"X-Org-Id": {""}, "X-Forwarded-For": {"203.0.113.9"}}, "ip:203.0.113.9", nil},
			{"10.0.0.1:1", http.Header{"X-Org-Id": {"a", "b"}}, "", ErrAmbiguousIdentity},
			{"10.0.0.1:1", http.Header{"X-Org-Id": {strings.Repeat("o", sluice.MaxAttrLen)}}, "header:" + strings.Repeat("o", sluice.MaxAttrLen), nil},
			{"10.0.0.1:1", http.Header{"X-Org-Id": {strings.Repeat("o", sluice.MaxAttrLen+1)}}, "", ErrIdentityTooLong},
			{"203.0.113.5:1", http.Header{"X-Org-Id": {"a", "b"}}, "ip:203.0.113.5", nil}, // never read
		} {
			for _, supplied := range []bool{false, true} {
				var k string
				var err error
				if supplied {
					k, err = id.KeyFor(scope, Caller{UserID: "u"}.With("org", "program"), tt.remote, tt.h)
				} else {
					k, err = id.Key(scope, tt.remote, tt.h)
				}
				if k != tt.want || !errors.Is(err, tt.err) || (err != nil) != (tt.err != nil) {
					t.Errorf("only=%v supplied=%v %s %v: %q, %v; want %q, %v", only, supplied, tt.remote, tt.h, k, err, tt.want, tt.err)
				}
				if err != nil && !errors.Is(err, sluice.ErrBadIdentity) {
					t.Errorf("%v does not match sluice.ErrBadIdentity", err)
				}
			}
		}
	}
}

// An attribute scope reads the Caller the program supplies; without it,
// or without the attribute, the caller is counted by IP.
func TestAttrScopeKey(t *testing.T) {
	id := newTestIdentifier(t, Config{})
	scope := sluice.ScopeAttr("org")
	h := http.Header{"X-User-Id": {"u"}}
	who := Caller{UserID: "u"}.With("team", "red").With("org", "acme")
	for _, tt := range []struct {
		who  *Caller
		want string
	}{
		{&who, "attr:acme"},
		{nil, "ip:203.0.113.5"},
		{&Caller{UserID: "u"}, "ip:203.0.113.5"},
		{ptr(who.With("org", "")), "ip:203.0.113.5"},
		{ptr(who.With("org", "globex")), "attr:globex"},
	} {
		var k string
		var err error
		if tt.who == nil {
			k, err = id.Key(scope, "203.0.113.5:1", h)
		} else {
			k, err = id.KeyFor(scope, *tt.who, "203.0.113.5:1", h)
		}
		if err != nil || k != tt.want {
			t.Errorf("%+v: %q, %v; want %q", tt.who, k, err, tt.want)
		}
	}
	long := who.With("org", strings.Repeat("o", sluice.MaxAttrLen+1))
	if _, err := id.KeyFor(scope, long, "203.0.113.5:1", h); !errors.Is(err, ErrIdentityTooLong) {
		t.Errorf("attribute over MaxAttrLen: %v", err)
	}
	full := Caller{}
	for _, n := range []string{"a", "b", "c", "d"} {
		full = full.With(n, n)
	}
	if full.Attr("d") != "d" || full.With("a", "x").Attr("a") != "x" {
		t.Fatal("four attributes do not fit, or one cannot be set again")
	}
	if _, err := id.KeyFor(scope, full.With("org", "acme"), "203.0.113.5:1", h); err == nil || errors.Is(err, ErrBadIdentity) {
		t.Errorf("a fifth attribute: %v, want the program's error", err)
	}
	if k, err := id.Key(sluice.ScopeParam("org"), "203.0.113.5:1", h); k != "" || err != nil {
		t.Errorf("param scope: %q, %v; want the Door's (empty)", k, err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = id.KeyFor(sluice.ScopeUser, Caller{UserID: "u"}, "203.0.113.5:1", h) }); n > 1 {
		t.Errorf("KeyFor of a user allocates %v times, want at most the key", n)
	}
}

func ptr[T any](v T) *T { return &v }

// Whatever a client sends in a header a rule counts by, its key is at most
// MaxKeyLen bytes, or a bad identity.
func TestHeaderScopeKeyBounded(t *testing.T) {
	id := newTestIdentifier(t, Config{})
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.OneOf(rapid.IntRange(0, 40), rapid.IntRange(sluice.MaxAttrLen-2, sluice.MaxAttrLen+2)).Draw(t, "n")
		v := strings.Repeat("v", n)
		k, err := id.Key(sluice.ScopeHeader("X-Org-Id"), "10.0.0.1:1", http.Header{"X-Org-Id": {v}})
		switch {
		case err != nil && !errors.Is(err, ErrBadIdentity):
			t.Fatalf("%d bytes: %v", n, err)
		case err == nil && len(k) > MaxKeyLen:
			t.Fatalf("%d bytes: key of %d over MaxKeyLen %d", n, len(k), MaxKeyLen)
		case (err != nil) != (n > sluice.MaxAttrLen):
			t.Fatalf("%d bytes: %v", n, err)
		}
	})
}

// ParseKey reads the keys of the attribute scopes as the Identifier makes
// them.
func TestParseKeyAttributes(t *testing.T) {
	id := newTestIdentifier(t, Config{})
	for _, s := range []string{"header:acme", "attr:acme", "param:acme"} {
		if k, err := id.ParseKey(s); k != s || err != nil {
			t.Errorf("ParseKey(%q): %q, %v", s, k, err)
		}
	}
	if _, err := id.ParseKey("attr:" + strings.Repeat("a", sluice.MaxAttrLen+1)); !errors.Is(err, ErrBadKey) {
		t.Errorf("long attribute: %v", err)
	}
}
