package httplimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/identity"
)

// request builds a GET request from remote with the given header lines
// ("Name: value"), each added in order.
func request(remote string, headers ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/api/orders", nil)
	r.RemoteAddr = remote
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ":")
		r.Header.Add(name, strings.TrimPrefix(value, " "))
	}
	return r
}

func apiKeyKey(k string) string {
	sum := sha256.Sum256([]byte(k))
	return "key:" + hex.EncodeToString(sum[:16])
}

func TestKeyFunc(t *testing.T) {
	type ctxKey struct{}
	errNoToken := errors.New("token expired")
	id, err := identity.New(identity.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	fn := func(r *http.Request) (identity.Caller, error) {
		if r.Header.Get("X-Expired") != "" {
			return identity.Caller{}, errNoToken
		}
		ident, _ := r.Context().Value(ctxKey{}).(identity.Caller)
		return ident, nil
	}
	keyOf := func(r *http.Request, scope string) (string, error) {
		return callerKey(id, fn, r, sluice.Scope(scope))
	}
	with := func(r *http.Request, ident identity.Caller) *http.Request {
		return r.WithContext(context.WithValue(r.Context(), ctxKey{}, ident))
	}
	// Func overrides the headers.
	r := with(request("203.0.113.5:1", "X-User-ID: mallory", "X-API-Key: stolen"), identity.Caller{UserID: "alice", APIKey: "k1"})
	if k, err := keyOf(r, "user"); err != nil || k != "user:alice" {
		t.Errorf("user: %q, %v", k, err)
	}
	if k, err := keyOf(r, "api_key"); err != nil || k != apiKeyKey("k1") {
		t.Errorf("api_key: %q, %v", k, err)
	}
	// An anonymous Func result falls back to the IP, headers or not, and
	// the forwarding header is read as for any request.
	r = request("203.0.113.5:1", "X-User-ID: mallory", "X-API-Key: stolen")
	for _, scope := range []string{"user", "api_key"} {
		if k, err := keyOf(r, scope); err != nil || k != "ip:203.0.113.5" {
			t.Errorf("%s, anonymous: %q, %v", scope, k, err)
		}
	}
	if k, err := keyOf(request("10.0.0.1:1", "X-Forwarded-For: 198.51.100.1"), "user"); err != nil || k != "ip:198.51.100.1" {
		t.Errorf("anonymous through a trusted proxy: %q, %v", k, err)
	}
	// Func's values are bounded as the headers' are.
	r = with(request("203.0.113.5:1"), identity.Caller{UserID: strings.Repeat("u", identity.MaxUserIDLen+1)})
	if _, err := keyOf(r, "user"); !errors.Is(err, identity.ErrIdentityTooLong) {
		t.Errorf("long user from Func: %v", err)
	}
	// Func's error is passed on, wrapped; ip and global rules do not call it.
	r = request("203.0.113.5:1", "X-Expired: 1")
	if _, err := keyOf(r, "user"); !errors.Is(err, errNoToken) || errors.Is(err, identity.ErrBadIdentity) {
		t.Errorf("Func error: %v", err)
	}
	if k, err := keyOf(r, "ip"); err != nil || k != "ip:203.0.113.5" {
		t.Errorf("ip with failing Func: %q, %v", k, err)
	}
	if k, err := keyOf(r, "global"); err != nil || k != "global" {
		t.Errorf("global with failing Func: %q, %v", k, err)
	}
}

func TestKeyFuncPanicNotRecovered(t *testing.T) {
	id, _ := identity.New(identity.Config{})
	fn := func(*http.Request) (identity.Caller, error) { panic("boom") }
	defer func() {
		if recover() != "boom" {
			t.Error("the panic in Func did not reach the caller")
		}
	}()
	_, _ = callerKey(id, fn, request("203.0.113.5:1"), sluice.ScopeUser)
}

// A request without a peer address is an ErrNoPeerAddr naming what
// RemoteAddr held, when and only when an IP key is needed.
func TestKeyNoPeer(t *testing.T) {
	id, _ := identity.New(identity.Config{})
	_, err := callerKey(id, nil, request("@unix"), sluice.ScopeIP)
	if !errors.Is(err, identity.ErrNoPeerAddr) || !strings.Contains(err.Error(), `"@unix"`) {
		t.Errorf("ip key without a peer: %v, want ErrNoPeerAddr naming \"@unix\"", err)
	}
	if k, err := callerKey(id, nil, request("@unix", "X-User-ID: alice"), sluice.ScopeUser); err != nil || k != "user:alice" {
		t.Errorf("named user without a peer: %q, %v", k, err)
	}
	if k, err := callerKey(id, nil, request("@unix"), sluice.ScopeGlobal); err != nil || k != "global" {
		t.Errorf("global without a peer: %q, %v", k, err)
	}
}

func BenchmarkCallerKey(b *testing.B) {
	id, err := identity.New(identity.Config{TrustedProxies: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48"), netip.MustParsePrefix("127.0.0.1/32"),
	}})
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name, scope, remote string
		headers             []string
	}{
		{"user", "user", "203.0.113.5:1234", []string{"X-User-ID: alice"}},
		{"api_key", "api_key", "203.0.113.5:1234", []string{"X-API-Key: sk_live_0123456789abcdef"}},
		{"ip", "ip", "203.0.113.5:1234", nil},
		{"ip_v6", "ip", "[2001:db8:1:2::7]:1234", nil},
		{"ip_via_proxy", "ip", "10.0.0.1:1234", []string{"X-Forwarded-For: 1.1.1.1, 198.51.100.1, 10.0.0.2"}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			r := request(c.remote, c.headers...)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := callerKey(id, nil, r, sluice.Scope(c.scope)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
