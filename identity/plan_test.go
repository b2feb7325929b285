package identity

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
)

func TestPlan(t *testing.T) {
	id := newTestIdentifier(t, Config{PlanHeader: "x-sluice-plan"})
	for _, tt := range []struct {
		name, remote string
		headers      []string
		want         string
		err          error
	}{
		{"from a trusted proxy", "10.0.0.1:1", []string{"X-Sluice-Plan: premium"}, "premium", nil},
		{"spaces trimmed", "10.0.0.1:1", []string{"X-Sluice-Plan:  premium\t"}, "premium", nil},
		{"from a client: ignored", "203.0.113.5:1", []string{"X-Sluice-Plan: premium"}, "", nil},
		{"from a client naming a trusted proxy: ignored", "203.0.113.5:1", []string{"X-Sluice-Plan: premium", "X-Forwarded-For: 10.0.0.1"}, "", nil},
		{"no header", "10.0.0.1:1", nil, "", nil},
		{"an empty header", "10.0.0.1:1", []string{"X-Sluice-Plan: "}, "", nil},
		{"given twice", "10.0.0.1:1", []string{"X-Sluice-Plan: a", "X-Sluice-Plan: b"}, "", ErrAmbiguousIdentity},
		{"not a plan name", "10.0.0.1:1", []string{"X-Sluice-Plan: pre mium"}, "", ErrBadPlan},
		{"no peer address", "@", []string{"X-Sluice-Plan: premium"}, "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := request(tt.remote, tt.headers...)
			got, err := id.Plan(r.remote, r.h)
			if got != tt.want || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("Plan = %q, %v; want %q, %v", got, err, tt.want, tt.err)
			}
			if err != nil && !errors.Is(err, ErrBadIdentity) {
				t.Errorf("%v does not match ErrBadIdentity", err)
			}
		})
	}
	// Without a plan header configured, not even a trusted proxy sets one.
	plain := newTestIdentifier(t, Config{})
	r := request("10.0.0.1:1", "X-Sluice-Plan: premium")
	if got, err := plain.Plan(r.remote, r.h); got != "" || err != nil {
		t.Errorf("no plan header configured: Plan = %q, %v; want none", got, err)
	}
	// A program's Caller wins; without a plan in it, the header counts.
	if got, err := id.PlanFor(Caller{UserID: "a", Plan: "gold"}, r.remote, r.h); got != "gold" || err != nil {
		t.Errorf("PlanFor(gold) = %q, %v; want gold", got, err)
	}
	if got, err := id.PlanFor(Caller{UserID: "a"}, r.remote, r.h); got != "premium" || err != nil {
		t.Errorf("PlanFor(no plan) from a trusted proxy = %q, %v; want the header's premium", got, err)
	}
	if _, err := id.PlanFor(Caller{Plan: "gold/x"}, r.remote, r.h); !errors.Is(err, ErrBadPlan) {
		t.Errorf("PlanFor(gold/x): %v, want ErrBadPlan", err)
	}
	if _, err := New(Config{PlanHeader: "X Plan"}); err == nil {
		t.Error("New with a plan header that is no header name: nil error")
	}
}

// TestParseKeyErrorsHideKeys checks that a caller key whose kind is
// mistyped or missing, which may be an API key, is not repeated in the
// error, which ends up in logs.
func TestParseKeyErrorsHideKeys(t *testing.T) {
	id := newTestIdentifier(t, Config{})
	// Nothing typed is echoed, the part before the colon included: a key
	// such as sk_live_a:b would show its first half.
	for _, in := range []string{"kee:sk_live_SECRET123", "sk_live_SECRET123", "Key:sk_live_SECRET123", "sk_live_SECRET:123", "sk_live_SECRET:"} {
		_, err := id.ParseKey(in)
		if !errors.Is(err, ErrBadKey) || strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "sk_live") {
			t.Errorf("ParseKey(%q): %v; want an ErrBadKey that shows nothing of what was given", in, err)
		}
		if err != nil && !strings.Contains(err.Error(), "want "+keyForms) {
			t.Errorf("ParseKey(%q): %v; want the valid kinds listed", in, err)
		}
	}
}

func TestParseKey(t *testing.T) {
	id := newTestIdentifier(t, Config{})
	keyOfAPIKey := func(k string) string {
		t.Helper()
		got, err := keyOf(id, request("203.0.113.5:1", "X-API-Key: "+k), "api_key")
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	secret := keyOfAPIKey("sk_live_123")
	for _, tt := range []struct{ in, want string }{
		{"user:alice", "user:alice"},
		{"user:ip:192.0.2.1", "user:ip:192.0.2.1"},
		{"key:sk_live_123", secret},
		{"keyhash:" + strings.TrimPrefix(secret, "key:"), secret},
		{"ip:192.0.2.1", "ip:192.0.2.1"},
		{"ip:::ffff:192.0.2.1", "ip:192.0.2.1"},
		{"ip:2001:db8:1:2::5", "ip:2001:db8:1:2::/64"},
		{"ip:2001:db8:1:2::/64", "ip:2001:db8:1:2::/64"},
		{"global", "global"},
	} {
		got, err := id.ParseKey(tt.in)
		if got != tt.want || err != nil {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	// The doors' keys for the same callers.
	for _, c := range []struct{ in, scope, remote, header string }{
		{"user:alice", "user", "203.0.113.5:1", "X-User-ID: alice"},
		{"ip:2001:db8:1:2::5", "ip", "[2001:db8:1:2::77]:1", ""},
		{"ip:203.0.113.5", "user", "203.0.113.5:1", ""},
	} {
		var hs []string
		if c.header != "" {
			hs = append(hs, c.header)
		}
		door, err := keyOf(id, request(c.remote, hs...), c.scope)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := id.ParseKey(c.in); got != door {
			t.Errorf("ParseKey(%q) = %q, the door's key is %q", c.in, got, door)
		}
	}
	for _, bad := range []string{
		"", "alice", "user:", "key:", "tenant:a", "user: alice", "ip:example.com", "ip:192.0.2.0/24",
		"ip:2001:db8::/48", "ip:fe80::1%eth0", "keyhash:abc", "keyhash:" + strings.ToUpper(strings.TrimPrefix(secret, "key:")),
		"user:" + strings.Repeat("a", MaxUserIDLen+1), "global:x",
	} {
		if got, err := id.ParseKey(bad); !errors.Is(err, ErrBadKey) {
			t.Errorf("ParseKey(%q) = %q, %v; want an ErrBadKey", bad, got, err)
		}
	}
	// An error never shows the API key it was given.
	if _, err := id.ParseKey("key: sk_live_123"); err == nil || strings.Contains(err.Error(), "sk_live") {
		t.Errorf("ParseKey of a spaced API key: %v, want an error without the key", err)
	}
}

// What an operator writes for a caller is the key the doors count it
// under, for any user id and API key a header can carry.
func TestParseKeyIsTheDoorsKey(t *testing.T) {
	id := newTestIdentifier(t, Config{})
	value := rapid.StringMatching(`[!-~]([ -~]{0,40}[!-~])?`)
	rapid.Check(t, func(t *rapid.T) {
		v := value.Draw(t, "value")
		for _, c := range []struct {
			scope sluice.Scope
			who   Caller
			form  string
		}{{sluice.ScopeUser, Caller{UserID: v}, "user:"}, {sluice.ScopeAPIKey, Caller{APIKey: v}, "key:"}} {
			door, err := id.KeyFor(c.scope, c.who, "203.0.113.5:1", http.Header{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := id.ParseKey(c.form + v)
			if err != nil || got != door {
				t.Fatalf("ParseKey(%q) = %q, %v; the door's key is %q", c.form+v, got, err, door)
			}
		}
	})
}

// FuzzParseKey: no input makes ParseKey panic, what it accepts is of one
// of the forms Key returns (or such a key within a tenant's), and the
// form ShowKey gives it reads back as itself.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"user:alice", "key:sk", "keyhash:0123456789abcdef0123456789abcdef", "ip:192.0.2.1", "ip:2001:db8::/64", "global", "ip:", ":",
		"attr:acme", "header:acme", "param:o1", "{attr:acme}user:alice", "{header:a%7Db}ip:192.0.2.1", "{attr:x}{attr:y}user:z", "{param:o}user:a", "{attr:%}user:a"} {
		f.Add(s)
	}
	id := newTestIdentifier(f, Config{})
	f.Fuzz(func(t *testing.T, s string) {
		got, err := id.ParseKey(s)
		if err != nil {
			if !errors.Is(err, ErrBadKey) {
				t.Fatalf("ParseKey(%q): %v, not an ErrBadKey", s, err)
			}
			return
		}
		own := got
		if tenant, o, ok := sluice.SplitNestedKey(got); ok {
			if !strings.HasPrefix(tenant, "attr:") && !strings.HasPrefix(tenant, "header:") {
				t.Fatalf("ParseKey(%q) = %q: a tenant %q that is no attr: or header: key", s, got, tenant)
			}
			if _, _, again := sluice.SplitNestedKey(o); again {
				t.Fatalf("ParseKey(%q) = %q: nested twice", s, got)
			}
			own = o
		}
		switch {
		case own == "global", strings.HasPrefix(own, "user:") && len(own) > 5:
		case strings.HasPrefix(own, "key:") && len(own) == 36 && isLowerHex(own[4:]):
		case strings.HasPrefix(own, "ip:"), strings.HasPrefix(own, "attr:"), strings.HasPrefix(own, "header:"), strings.HasPrefix(own, "param:"):
		default:
			t.Fatalf("ParseKey(%q) = %q: not a caller key", s, got)
		}
		if again, err := id.ParseKey(ShowKey(got)); err != nil || again != got {
			t.Fatalf("ParseKey(%q) = %q, whose shown form %q reads back as %q, %v", s, got, ShowKey(got), again, err)
		}
	})
}
