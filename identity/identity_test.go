package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
)

// trustedProxies are the proxies the tests trust.
var trustedProxies = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("2001:db8:ffff::/48"),
	netip.MustParsePrefix("127.0.0.1/32"),
}

func newTestIdentifier(t testing.TB, cfg Config) *Identifier {
	t.Helper()
	if cfg.TrustedProxies == nil {
		cfg.TrustedProxies = trustedProxies
	}
	id, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return id
}

// req is what a door passes an Identifier of one request.
type req struct {
	remote string
	peer   netip.Addr // invalid when remote does not parse
	h      http.Header
}

// request builds a request from remote (as net/http's RemoteAddr) with the
// given header lines ("Name: value"), each added in order.
func request(remote string, headers ...string) req {
	peer, _ := ParsePeer(remote)
	r := req{remote: remote, peer: peer, h: http.Header{}}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ":")
		r.h.Add(name, strings.TrimPrefix(value, " "))
	}
	return r
}

func clientIP(id *Identifier, r req) (netip.Addr, error) { return id.ClientIP(r.peer, r.h) }

func keyOf(id *Identifier, r req, scope string) (string, error) {
	return id.Key(sluice.Scope(scope), r.remote, r.h)
}

func TestClientIP(t *testing.T) {
	xff := newTestIdentifier(t, Config{})
	fwd := newTestIdentifier(t, Config{ForwardingHeader: Forwarded})
	const (
		untrusted = "203.0.113.5:1234"
		trusted   = "10.0.0.1:4321"
		bad       = "" // ErrBadForwarding
	)
	tests := []struct {
		name    string
		remote  string
		headers []string
		want    string
	}{
		// The peer alone.
		{"no headers", untrusted, nil, "203.0.113.5"},
		{"trusted peer, no headers", trusted, nil, "10.0.0.1"},
		{"remote without port", "203.0.113.5", nil, "203.0.113.5"},
		{"IPv6 peer", "[2001:db8:1:2::7]:443", nil, "2001:db8:1:2::7"},
		{"IPv6 peer with zone", "[fe80::1%eth0]:443", nil, "fe80::1"},
		{"IPv4-mapped peer", "[::ffff:203.0.113.5]:1234", nil, "203.0.113.5"},

		// Untrusted peers: the headers are ignored.
		{"XFF from untrusted peer", untrusted, []string{"X-Forwarded-For: 198.51.100.1"}, "203.0.113.5"},
		{"Forwarded from untrusted peer", untrusted, []string{"Forwarded: for=198.51.100.1"}, "203.0.113.5"},
		{"XFF naming a trusted proxy from untrusted peer", untrusted, []string{"X-Forwarded-For: 10.0.0.9"}, "203.0.113.5"},

		// X-Forwarded-For from a trusted peer.
		{"XFF one hop", trusted, []string{"X-Forwarded-For: 198.51.100.1"}, "198.51.100.1"},
		{"XFF spoofed hops to the left", trusted, []string{"X-Forwarded-For: 1.1.1.1, 2.2.2.2, 198.51.100.1"}, "198.51.100.1"},
		{"XFF chain of trusted proxies", trusted, []string{"X-Forwarded-For: 1.1.1.1, 198.51.100.1, 10.0.0.2, 10.0.0.3"}, "198.51.100.1"},
		{"XFF chain through IPv6 proxy", "[2001:db8:ffff::1]:443", []string{"X-Forwarded-For: 1.1.1.1,198.51.100.1,2001:db8:ffff:1::2"}, "198.51.100.1"},
		{"XFF every hop trusted", trusted, []string{"X-Forwarded-For: 10.0.0.5, 10.0.0.2"}, "10.0.0.5"},
		{"XFF several lines concatenate", trusted, []string{"X-Forwarded-For: 1.1.1.1", "X-Forwarded-For: 198.51.100.1, 10.0.0.2"}, "198.51.100.1"},
		{"XFF several lines, client in the last", trusted, []string{"X-Forwarded-For: 198.51.100.9", "X-Forwarded-For: 198.51.100.1"}, "198.51.100.1"},
		{"XFF spaces and tabs", trusted, []string{"X-Forwarded-For: \t198.51.100.1 \t,  10.0.0.2  "}, "198.51.100.1"},
		{"XFF IPv4 with port", trusted, []string{"X-Forwarded-For: 198.51.100.1:5555"}, "198.51.100.1"},
		{"XFF bare IPv6", trusted, []string{"X-Forwarded-For: 2001:db8:1::1"}, "2001:db8:1::1"},
		{"XFF bracketed IPv6", trusted, []string{"X-Forwarded-For: [2001:db8:1::1]"}, "2001:db8:1::1"},
		{"XFF bracketed IPv6 with port", trusted, []string{"X-Forwarded-For: [2001:db8:1::1]:443"}, "2001:db8:1::1"},
		{"XFF IPv4-mapped", trusted, []string{"X-Forwarded-For: ::ffff:198.51.100.1"}, "198.51.100.1"},
		{"XFF IPv4-mapped trusted hop", trusted, []string{"X-Forwarded-For: 198.51.100.1, ::ffff:10.0.0.2"}, "198.51.100.1"},
		{"XFF empty", trusted, []string{"X-Forwarded-For: "}, "10.0.0.1"},
		{"XFF empty elements skipped", trusted, []string{"X-Forwarded-For: , 198.51.100.1,, "}, "198.51.100.1"},
		{"XFF only commas", trusted, []string{"X-Forwarded-For: ,,,"}, "10.0.0.1"},

		// A hop that cannot be read where the client should be is refused,
		// never taken for the last trusted hop (a proxy, shared by all).
		{"XFF garbage", trusted, []string{"X-Forwarded-For: garbage"}, bad},
		{"XFF garbage right of client", trusted, []string{"X-Forwarded-For: 198.51.100.1, garbage"}, bad},
		{"XFF garbage behind a trusted hop", trusted, []string{"X-Forwarded-For: 198.51.100.1, garbage, 10.0.0.2"}, bad},
		{"XFF garbage left of client", trusted, []string{"X-Forwarded-For: garbage, 198.51.100.1"}, "198.51.100.1"},
		{"XFF zone", trusted, []string{"X-Forwarded-For: fe80::1%eth0"}, bad},
		{"XFF prefix", trusted, []string{"X-Forwarded-For: 198.51.100.0/24"}, bad},
		{"XFF bad port", trusted, []string{"X-Forwarded-For: 198.51.100.1:http"}, bad},
		{"XFF long port", trusted, []string{"X-Forwarded-For: 198.51.100.1:123456"}, bad},
		{"XFF IPv4 in brackets", trusted, []string{"X-Forwarded-For: [198.51.100.1]"}, bad},
		{"XFF unclosed bracket", trusted, []string{"X-Forwarded-For: [2001:db8:1::1"}, bad},
		{"XFF junk after bracket", trusted, []string{"X-Forwarded-For: [2001:db8:1::1]x"}, bad},
		{"XFF quoted", trusted, []string{`X-Forwarded-For: "198.51.100.1"`}, bad},
		{"XFF unknown", trusted, []string{"X-Forwarded-For: unknown"}, bad},

		// Forwarded (RFC 7239) from a trusted peer.
		{"Forwarded one hop", trusted, []string{"Forwarded: for=198.51.100.1"}, "198.51.100.1"},
		{"Forwarded with other params", trusted, []string{"Forwarded: for=198.51.100.1;proto=http;by=203.0.113.43"}, "198.51.100.1"},
		{"Forwarded params in another order", trusted, []string{"Forwarded: proto=https; by=10.0.0.1; for=198.51.100.1"}, "198.51.100.1"},
		{"Forwarded name case", trusted, []string{"Forwarded: For=198.51.100.1"}, "198.51.100.1"},
		{"Forwarded quoted IPv4", trusted, []string{`Forwarded: for="198.51.100.1"`}, "198.51.100.1"},
		{"Forwarded quoted IPv4 with port", trusted, []string{`Forwarded: for="198.51.100.1:8080"`}, "198.51.100.1"},
		{"Forwarded quoted IPv6", trusted, []string{`Forwarded: for="[2001:db8:cafe::17]"`}, "2001:db8:cafe::17"},
		{"Forwarded quoted IPv6 with port", "[2001:db8:ffff::1]:443", []string{`Forwarded: for="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::17"},
		{"Forwarded obfuscated port", trusted, []string{`Forwarded: for="198.51.100.1:_abc-1"`}, "198.51.100.1"},
		{"Forwarded IPv4-mapped", trusted, []string{`Forwarded: for="[::ffff:198.51.100.1]"`}, "198.51.100.1"},
		{"Forwarded quoted-pair", trusted, []string{`Forwarded: for="\198.51.100.1"`}, "198.51.100.1"},
		{"Forwarded chain", trusted, []string{`Forwarded: for=1.1.1.1, for="[2001:db8:cafe::17]", for=10.0.0.2;proto=https`}, "2001:db8:cafe::17"},
		{"Forwarded several lines", trusted, []string{"Forwarded: for=1.1.1.1", "Forwarded: for=198.51.100.1;proto=https", "Forwarded: for=10.0.0.2"}, "198.51.100.1"},
		{"Forwarded quoted comma", trusted, []string{`Forwarded: for=198.51.100.1;x="a,b;c", for=10.0.0.2`}, "198.51.100.1"},
		{"Forwarded every hop trusted", trusted, []string{"Forwarded: for=10.0.0.7, for=10.0.0.2"}, "10.0.0.7"},
		{"Forwarded empty elements", trusted, []string{"Forwarded: , for=198.51.100.1 ,;, "}, "198.51.100.1"},

		// Obfuscated and unreadable Forwarded hops where the client should be
		// are refused; to the left of the client they are never reached.
		{"Forwarded unknown", trusted, []string{"Forwarded: for=unknown"}, bad},
		{"Forwarded obfuscated", trusted, []string{"Forwarded: for=_hidden"}, bad},
		{"Forwarded obfuscated behind trusted hop", trusted, []string{"Forwarded: for=198.51.100.1, for=_hidden, for=10.0.0.2"}, bad},
		{"Forwarded unknown left of client", trusted, []string{"Forwarded: for=unknown, for=198.51.100.1"}, "198.51.100.1"},
		{"Forwarded without for", trusted, []string{"Forwarded: proto=https"}, bad},
		{"Forwarded last element without for", trusted, []string{"Forwarded: for=198.51.100.1, proto=https"}, bad},
		{"Forwarded unquoted IPv6", trusted, []string{"Forwarded: for=2001:db8:cafe::17"}, bad},
		{"Forwarded quoted IPv6 without brackets", trusted, []string{`Forwarded: for="2001:db8:cafe::17"`}, bad},
		{"Forwarded unquoted port", trusted, []string{"Forwarded: for=198.51.100.1:80"}, bad},
		{"Forwarded unterminated quote", trusted, []string{`Forwarded: for="198.51.100.1`}, bad},
		{"Forwarded unterminated quote swallows the line", trusted, []string{`Forwarded: for="1.1.1.1, for=198.51.100.1`}, bad},
		{"Forwarded quote does not span lines", trusted, []string{`Forwarded: for="1.1.1.1`, "Forwarded: for=198.51.100.1"}, "198.51.100.1"},
		{"Forwarded repeated for", trusted, []string{"Forwarded: for=1.1.1.1;for=198.51.100.1"}, bad},
		{"Forwarded empty value", trusted, []string{"Forwarded: for="}, bad},
		{"Forwarded space around =", trusted, []string{"Forwarded: for = 198.51.100.1"}, bad},
		{"Forwarded bad other pair", trusted, []string{"Forwarded: for=198.51.100.1;proto"}, bad},
		{"Forwarded zone", trusted, []string{`Forwarded: for="[fe80::1%eth0]"`}, bad},
		{"Forwarded bad port", trusted, []string{`Forwarded: for="198.51.100.1:_"`}, bad},
		{"Forwarded control char", trusted, []string{"Forwarded: for=\"198.51.100.1\x01\""}, bad},
		{"Forwarded garbage", trusted, []string{"Forwarded: ;;==\"\\"}, bad},
	}
	for _, tt := range tests {
		// A case of one header runs where that header is the one read;
		// a case of none runs under both.
		ids := map[string]*Identifier{"x-forwarded-for": xff, "forwarded": fwd}
		for _, h := range tt.headers {
			if strings.HasPrefix(h, "Forwarded:") {
				delete(ids, "x-forwarded-for")
			} else {
				delete(ids, "forwarded")
			}
		}
		for mode, id := range ids {
			t.Run(mode+"/"+tt.name, func(t *testing.T) {
				got, err := clientIP(id, request(tt.remote, tt.headers...))
				if tt.want == bad {
					if !errors.Is(err, ErrBadForwarding) || !errors.Is(err, ErrBadIdentity) {
						t.Fatalf("ClientIP = %v, %v; want ErrBadForwarding, never the proxy's own address", got, err)
					}
					return
				}
				if err != nil {
					t.Fatalf("ClientIP: %v", err)
				}
				if want := netip.MustParseAddr(tt.want); got != want {
					t.Errorf("ClientIP = %v, want %v", got, want)
				}
			})
		}
	}
}

// Only the configured forwarding header is read: the other, whatever it
// says and whoever sends it, cannot move a request onto another key (in
// particular not onto the trusted proxy's own, shared by every request
// that lands there).
func TestClientIPReadsOneHeader(t *testing.T) {
	xff := newTestIdentifier(t, Config{})
	fwd := newTestIdentifier(t, Config{ForwardingHeader: Forwarded})
	const trusted, untrusted = "10.0.0.1:4321", "203.0.113.5:1234"
	tests := []struct {
		name           string
		remote         string
		headers        []string
		wantX, wantFwd string
	}{
		{"both agree", trusted, []string{"X-Forwarded-For: 198.51.100.1", "Forwarded: for=198.51.100.1"}, "198.51.100.1", "198.51.100.1"},
		{"both agree after trusted hops", trusted, []string{"X-Forwarded-For: 6.6.6.6, 198.51.100.1, 10.0.0.2", "Forwarded: for=198.51.100.1;proto=https"}, "198.51.100.1", "198.51.100.1"},
		{"both disagree", trusted, []string{"X-Forwarded-For: 198.51.100.1", "Forwarded: for=1.1.1.1"}, "198.51.100.1", "1.1.1.1"},
		{"client adds Forwarded naming the proxy", trusted, []string{"Forwarded: for=10.0.0.1", "X-Forwarded-For: 198.51.100.1"}, "198.51.100.1", "10.0.0.1"},
		{"client adds garbage Forwarded", trusted, []string{"Forwarded: for=_hidden", "X-Forwarded-For: 198.51.100.1"}, "198.51.100.1", ""},
		{"client adds X-Forwarded-For", trusted, []string{"X-Forwarded-For: 10.0.0.1, garbage", "Forwarded: for=198.51.100.1"}, "", "198.51.100.1"},
		{"the other header alone", trusted, []string{"Forwarded: for=198.51.100.1"}, "10.0.0.1", "198.51.100.1"},
		{"empty Forwarded", trusted, []string{"X-Forwarded-For: 198.51.100.1", "Forwarded: "}, "198.51.100.1", "10.0.0.1"},
		{"empty XFF", trusted, []string{"X-Forwarded-For: ,", "Forwarded: for=198.51.100.1"}, "10.0.0.1", "198.51.100.1"},
		{"untrusted peer, both", untrusted, []string{"X-Forwarded-For: 198.51.100.1", "Forwarded: for=198.51.100.1"}, "203.0.113.5", "203.0.113.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := request(tt.remote, tt.headers...)
			for _, c := range []struct {
				mode string
				id   *Identifier
				want string // empty: ErrBadForwarding
			}{{"x-forwarded-for", xff, tt.wantX}, {"forwarded", fwd, tt.wantFwd}} {
				got, err := clientIP(c.id, r)
				if c.want == "" {
					if !errors.Is(err, ErrBadForwarding) {
						t.Errorf("%s: ClientIP = %v, %v; want ErrBadForwarding", c.mode, got, err)
					}
				} else if err != nil || got != netip.MustParseAddr(c.want) {
					t.Errorf("%s: ClientIP = %v, %v; want %s", c.mode, got, err, c.want)
				}
			}
		})
	}
}

func TestClientIPNoPeer(t *testing.T) {
	id := newTestIdentifier(t, Config{})
	for _, remote := range []string{"", "@", "pipe", "localhost:80", "10.0.0.1:80:80"} {
		if _, err := ParsePeer(remote); !errors.Is(err, ErrNoPeerAddr) || !strings.Contains(err.Error(), strconv.Quote(remote)) {
			t.Errorf("ParsePeer(%q) = %v, want ErrNoPeerAddr naming it", remote, err)
		}
		_, err := clientIP(id, request(remote, "X-Forwarded-For: 198.51.100.1"))
		if !errors.Is(err, ErrNoPeerAddr) {
			t.Errorf("RemoteAddr %q: err = %v, want ErrNoPeerAddr", remote, err)
		}
	}
}

func TestClientIPNoTrustedProxies(t *testing.T) {
	for _, h := range []ForwardingHeader{"", XForwardedFor, Forwarded} {
		id, err := New(Config{ForwardingHeader: h})
		if err != nil {
			t.Fatal(err)
		}
		got, err := clientIP(id, request("127.0.0.1:80", "X-Forwarded-For: 198.51.100.1", "Forwarded: for=198.51.100.1"))
		if err != nil || got != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("%q: ClientIP = %v, %v; want the peer: no proxy is trusted by default", h, got, err)
		}
	}
}

func apiKeyKey(k string) string {
	sum := sha256.Sum256([]byte(k))
	return "key:" + hex.EncodeToString(sum[:16])
}

func TestKey(t *testing.T) {
	id := newTestIdentifier(t, Config{})
	long := strings.Repeat("u", MaxUserIDLen)
	tests := []struct {
		name    string
		remote  string
		scope   string
		headers []string
		want    string
	}{
		{"global", "203.0.113.5:1", "global", []string{"X-User-ID: alice"}, "global"},
		{"ip v4", "203.0.113.5:1", "ip", []string{"X-User-ID: alice"}, "ip:203.0.113.5"},
		{"ip v4-mapped", "[::ffff:203.0.113.5]:1", "ip", nil, "ip:203.0.113.5"},
		{"ip v6 grouped", "[2001:db8:1:2:3:4:5:6]:1", "ip", nil, "ip:2001:db8:1:2::/64"},
		{"ip through trusted proxy", "10.0.0.1:1", "ip", []string{"X-Forwarded-For: 198.51.100.1"}, "ip:198.51.100.1"},
		{"ip spoofed from untrusted peer", "203.0.113.5:1", "ip", []string{"X-Forwarded-For: 198.51.100.1"}, "ip:203.0.113.5"},
		{"user", "203.0.113.5:1", "user", []string{"X-User-ID: alice"}, "user:alice"},
		{"user trimmed", "203.0.113.5:1", "user", []string{"X-User-ID:  \talice\t "}, "user:alice"},
		{"user at the length limit", "203.0.113.5:1", "user", []string{"X-User-ID: " + long}, "user:" + long},
		{"user looking like an ip key", "203.0.113.5:1", "user", []string{"X-User-ID: ip:198.51.100.1"}, "user:ip:198.51.100.1"},
		{"user anonymous", "203.0.113.5:1", "user", nil, "ip:203.0.113.5"},
		{"user blank", "203.0.113.5:1", "user", []string{"X-User-ID:  "}, "ip:203.0.113.5"},
		{"user anonymous v6", "[2001:db8:1:2::9]:1", "user", nil, "ip:2001:db8:1:2::/64"},
		{"user anonymous through proxy", "10.0.0.1:1", "user", []string{"X-Forwarded-For: 198.51.100.1"}, "ip:198.51.100.1"},
		{"user ignores api key", "203.0.113.5:1", "user", []string{"X-API-Key: k1"}, "ip:203.0.113.5"},
		{"api key", "203.0.113.5:1", "api_key", []string{"X-API-Key: k1", "X-User-ID: alice"}, apiKeyKey("k1")},
		{"api key anonymous", "203.0.113.5:1", "api_key", []string{"X-User-ID: alice"}, "ip:203.0.113.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := keyOf(id, request(tt.remote, tt.headers...), tt.scope)
			if err != nil {
				t.Fatalf("Key: %v", err)
			}
			if got != tt.want {
				t.Errorf("Key = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestKeyIPv6Grouping(t *testing.T) {
	key := func(id *Identifier, remote string) string {
		t.Helper()
		k, err := keyOf(id, request(remote), "ip")
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	id := newTestIdentifier(t, Config{})
	a := key(id, "[2001:db8:1:2::1]:1")
	b := key(id, "[2001:db8:1:2:ffff:ffff:ffff:ffff]:2")
	c := key(id, "[2001:db8:1:3::1]:1")
	if a != b {
		t.Errorf("one /64, two keys: %q, %q", a, b)
	}
	if a == c {
		t.Errorf("two /64s, one key: %q", a)
	}
	// Through a trusted proxy, the forwarded address is grouped too.
	if k := key(id, "10.0.0.1:1"); k != "ip:10.0.0.1" {
		t.Errorf("trusted peer alone: %q", k)
	}
	r := request("10.0.0.1:1", "X-Forwarded-For: 2001:db8:1:2::abcd")
	if k, _ := keyOf(id, r, "ip"); k != a {
		t.Errorf("forwarded address in the same /64: %q, want %q", k, a)
	}

	id48 := newTestIdentifier(t, Config{IPv6Prefix: 48})
	if a, c := key(id48, "[2001:db8:1:2::1]:1"), key(id48, "[2001:db8:1:3::1]:1"); a != c || a != "ip:2001:db8:1::/48" {
		t.Errorf("/48: %q and %q, want both ip:2001:db8:1::/48", a, c)
	}
	id128 := newTestIdentifier(t, Config{IPv6Prefix: 128})
	if a, b := key(id128, "[2001:db8:1:2::1]:1"), key(id128, "[2001:db8:1:2::2]:1"); a == b || a != "ip:2001:db8:1:2::1/128" {
		t.Errorf("/128: %q and %q", a, b)
	}
}

func TestKeyErrors(t *testing.T) {
	id := newTestIdentifier(t, Config{})
	tests := []struct {
		name    string
		remote  string
		scope   string
		headers []string
		want    error
	}{
		{"unknown scope", "203.0.113.5:1", "tenant", nil, ErrUnknownScope},
		{"empty scope", "203.0.113.5:1", "", nil, ErrUnknownScope},
		{"user too long", "203.0.113.5:1", "user", []string{"X-User-ID: " + strings.Repeat("u", MaxUserIDLen+1)}, ErrIdentityTooLong},
		{"api key too long", "203.0.113.5:1", "api_key", []string{"X-API-Key: " + strings.Repeat("k", MaxAPIKeyLen+1)}, ErrIdentityTooLong},
		{"user twice", "203.0.113.5:1", "user", []string{"X-User-ID: alice", "X-User-ID: bob"}, ErrAmbiguousIdentity},
		{"api key twice", "203.0.113.5:1", "api_key", []string{"X-API-Key: a", "X-API-Key: a"}, ErrAmbiguousIdentity},
		{"no peer, ip", "", "ip", nil, ErrNoPeerAddr},
		{"no peer, anonymous user", "@", "user", nil, ErrNoPeerAddr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := keyOf(id, request(tt.remote, tt.headers...), tt.scope)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Key = %q, %v; want %v", k, err, tt.want)
			}
			bad := errors.Is(tt.want, ErrBadIdentity)
			if errors.Is(err, ErrBadIdentity) != bad {
				t.Errorf("errors.Is(%v, ErrBadIdentity) = %v, want %v", err, !bad, bad)
			}
		})
	}
	// A named user without a peer address still has a key.
	if k, err := keyOf(id, request("@", "X-User-ID: alice"), "user"); err != nil || k != "user:alice" {
		t.Errorf("Key = %q, %v", k, err)
	}
	// The user header twice does not matter to an api_key rule.
	if k, err := keyOf(id, request("203.0.113.5:1", "X-User-ID: a", "X-User-ID: b"), "api_key"); err != nil || k != "ip:203.0.113.5" {
		t.Errorf("Key = %q, %v", k, err)
	}
}

func TestKeyAPIKeyHashed(t *testing.T) {
	id := newTestIdentifier(t, Config{})
	secret := "sk_live_0123456789abcdef"
	k1, err := keyOf(id, request("203.0.113.5:1", "X-API-Key: "+secret), "api_key")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(k1, secret) || len(k1) != len("key:")+32 {
		t.Errorf("key %q: want the secret hashed to 32 hex digits", k1)
	}
	k2, _ := keyOf(id, request("198.51.100.1:1", "X-API-Key: "+secret), "api_key")
	k3, _ := keyOf(id, request("203.0.113.5:1", "X-API-Key: "+secret+"x"), "api_key")
	if k1 != k2 || k1 == k3 {
		t.Errorf("same key from two places: %q, %q; another key: %q", k1, k2, k3)
	}
	long := strings.Repeat("k", MaxAPIKeyLen)
	if k, err := keyOf(id, request("203.0.113.5:1", "X-API-Key: "+long), "api_key"); err != nil || k != apiKeyKey(long) {
		t.Errorf("key at the length limit: %q, %v", k, err)
	}
}

func TestKeyCustomHeaders(t *testing.T) {
	id := newTestIdentifier(t, Config{UserHeader: "x-tenant-user", APIKeyHeader: "Authorization-Key"})
	r := request("203.0.113.5:1", "X-Tenant-User: alice", "X-User-ID: mallory", "Authorization-Key: k1", "X-API-Key: k2")
	if k, err := keyOf(id, r, "user"); err != nil || k != "user:alice" {
		t.Errorf("user: %q, %v", k, err)
	}
	if k, err := keyOf(id, r, "api_key"); err != nil || k != apiKeyKey("k1") {
		t.Errorf("api_key: %q, %v", k, err)
	}
}

func TestKeyHeadersFromTrustedProxiesOnly(t *testing.T) {
	id := newTestIdentifier(t, Config{HeadersFromTrustedProxiesOnly: true})
	tests := []struct {
		name    string
		remote  string
		scope   string
		headers []string
		want    string
	}{
		{"untrusted peer, user header ignored", "203.0.113.5:1", "user", []string{"X-User-ID: alice"}, "ip:203.0.113.5"},
		{"untrusted peer, api key ignored", "203.0.113.5:1", "api_key", []string{"X-API-Key: k1"}, "ip:203.0.113.5"},
		{"untrusted peer claiming a trusted XFF", "203.0.113.5:1", "user", []string{"X-User-ID: alice", "X-Forwarded-For: 10.0.0.1"}, "ip:203.0.113.5"},
		{"untrusted peer, repeated header ignored", "203.0.113.5:1", "user", []string{"X-User-ID: a", "X-User-ID: b"}, "ip:203.0.113.5"},
		{"trusted peer, user header", "10.0.0.1:1", "user", []string{"X-User-ID: alice", "X-Forwarded-For: 198.51.100.1"}, "user:alice"},
		{"trusted peer, api key", "10.0.0.1:1", "api_key", []string{"X-API-Key: k1"}, apiKeyKey("k1")},
		{"trusted v4-mapped peer", "[::ffff:10.0.0.1]:1", "user", []string{"X-User-ID: alice"}, "user:alice"},
		{"trusted peer, anonymous", "10.0.0.1:1", "user", []string{"X-Forwarded-For: 198.51.100.1"}, "ip:198.51.100.1"},
		{"no peer address", "@", "user", []string{"X-User-ID: alice"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := keyOf(id, request(tt.remote, tt.headers...), tt.scope)
			if tt.want == "" {
				if !errors.Is(err, ErrNoPeerAddr) {
					t.Errorf("Key = %q, %v; want ErrNoPeerAddr", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Key = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestNew(t *testing.T) {
	bad := []Config{
		{IPv6Prefix: -1},
		{IPv6Prefix: 129},
		{UserHeader: "X User"},
		{APIKeyHeader: "X-Key:"},
		{TrustedProxies: []netip.Prefix{{}}},
		{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/80")}},
		{ForwardingHeader: "x-real-ip"},
		{ForwardingHeader: "X-Forwarded-For"},
	}
	for _, cfg := range bad {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	// Defaults, and an IPv4-mapped trusted prefix read as IPv4.
	id, err := New(Config{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:10.1.0.0/112"), netip.MustParsePrefix("192.168.1.77/24")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if id.userHeader != http.CanonicalHeaderKey(DefaultUserHeader) || id.apiKeyHeader != http.CanonicalHeaderKey(DefaultAPIKeyHeader) || id.v6bits != DefaultIPv6Prefix || id.forwarded {
		t.Errorf("defaults: %+v", id)
	}
	for _, tc := range []struct{ remote, want string }{
		{"10.1.2.3:1", "198.51.100.1"},
		{"192.168.1.1:1", "198.51.100.1"},
		{"10.2.0.1:1", "10.2.0.1"},
	} {
		got, err := clientIP(id, request(tc.remote, "X-Forwarded-For: 198.51.100.1"))
		if err != nil || got.String() != tc.want {
			t.Errorf("peer %s: ClientIP = %v, %v; want %s", tc.remote, got, err, tc.want)
		}
	}
}

func TestIPKey(t *testing.T) {
	id := newTestIdentifier(t, Config{})
	for in, want := range map[string]string{
		"192.0.2.1":            "ip:192.0.2.1",
		"::ffff:192.0.2.1":     "ip:192.0.2.1",
		"2001:db8::1":          "ip:2001:db8::/64",
		"fe80::1%eth0":         "ip:fe80::/64",
		"::1":                  "ip:::/64",
		"2001:db8:aaaa:bbbb::": "ip:2001:db8:aaaa:bbbb::/64",
	} {
		if got := id.IPKey(netip.MustParseAddr(in)); got != want {
			t.Errorf("IPKey(%s) = %q, want %q", in, got, want)
		}
	}
}

// FuzzClientIP checks that no peer address, X-Forwarded-For and Forwarded
// make ClientIP panic, and that its answer is the peer or an address
// written in the configured forwarding header, and the latter only when the
// peer is trusted.
func FuzzClientIP(f *testing.F) {
	for _, seed := range [][3]string{
		{"10.0.0.1:1234", "198.51.100.1", ""},
		{"10.0.0.1:1234", "1.1.1.1, 198.51.100.1, 10.0.0.2", ""},
		{"203.0.113.5:1234", "198.51.100.1", "for=198.51.100.1"},
		{"10.0.0.1:1234", "", `for="[2001:db8:cafe::17]:4711", for=10.0.0.2;proto=https`},
		{"[2001:db8:ffff::1]:443", "[2001:db8:1::1]:443", ""},
		{"[::ffff:10.0.0.1]:80", "::ffff:198.51.100.1", "for=_hidden"},
		{"10.0.0.1:1", "garbage, 10.0.0.3", `for="198.51.100.1`},
		{"", "", ""},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	xff := newTestIdentifier(f, Config{})
	fwd := newTestIdentifier(f, Config{ForwardingHeader: Forwarded})
	f.Fuzz(func(t *testing.T, remote, xffValue, fwdValue string) {
		h := http.Header{}
		// Newlines split a fuzzed value into several header lines.
		for _, v := range strings.Split(xffValue, "\n") {
			h.Add("X-Forwarded-For", v)
		}
		for _, v := range strings.Split(fwdValue, "\n") {
			h.Add("Forwarded", v)
		}
		peer, perr := ParsePeer(remote)
		for _, c := range []struct {
			id   *Identifier
			read string // the header the identifier reads
		}{{xff, xffValue}, {fwd, fwdValue}} {
			got, err := c.id.ClientIP(peer, h)
			if err != nil {
				switch {
				case errors.Is(err, ErrNoPeerAddr) && perr != nil:
				case errors.Is(err, ErrBadForwarding) && perr == nil && c.id.isTrusted(peer.Unmap()):
					if len(err.Error()) > 200 {
						t.Fatalf("ClientIP: error of %d bytes: it must not quote the header", len(err.Error()))
					}
				default:
					t.Fatalf("ClientIP(%q): %v", remote, err)
				}
				continue
			}
			if perr != nil {
				t.Fatalf("ClientIP(%q) = %v, but the peer does not parse: %v", remote, got, perr)
			}
			if !got.IsValid() || got.Zone() != "" || got.Is4In6() {
				t.Fatalf("ClientIP = %v: not a plain address", got)
			}
			if got == peer.Unmap().WithZone("") {
				// The peer's own address only when the header read says
				// nothing: never in place of a hop it could not read.
				if c.id.isTrusted(got) && hasHop(c.id, h) {
					t.Fatalf("ClientIP = the trusted peer %v, but the header read, %q, names hops", got, c.read)
				}
				continue
			}
			if !c.id.isTrusted(peer) {
				t.Fatalf("ClientIP = %v from untrusted peer %v", got, peer)
			}
			if !mentions(c.read, got) {
				t.Fatalf("ClientIP = %v, not the peer %v and not in the header read, %q", got, peer, c.read)
			}
		}
	})
}

// hasHop reports whether the forwarding header id reads has a non-empty
// element in h.
func hasHop(id *Identifier, h http.Header) bool {
	if id.forwarded {
		var hops []hop
		for _, v := range h.Values("Forwarded") {
			hops = appendForwarded(hops, v)
		}
		return len(hops) > 0
	}
	for _, v := range h.Values("X-Forwarded-For") {
		for _, e := range strings.Split(v, ",") {
			if trimOWS(e) != "" {
				return true
			}
		}
	}
	return false
}

// FuzzForwardedElement checks the parser of one Forwarded field line on
// any text: it never panics, every hop it reads is an address written in
// the line, and an element a proxy appends after the line (as nginx's
// "$http_forwarded, for=$remote_addr" does) is either read as the last hop
// or, when the line left a quoted-string open, swallowed into an unreadable
// one: never replaced by a readable address the client wrote.
func FuzzForwardedElement(f *testing.F) {
	for _, seed := range []string{
		"for=198.51.100.1", `for="x`, `for="[2001:db8::1]:443";proto=https, for=10.0.0.2`,
		`for=1.1.1.1;x="a,b;c"`, `x="\`, ";;==\"", "for=_hidden, for=unknown", "",
	} {
		f.Add(seed)
	}
	const appended = "for=192.0.2.77"
	want := netip.MustParseAddr("192.0.2.77")
	f.Fuzz(func(t *testing.T, line string) {
		if strings.ContainsAny(line, "\r\n") {
			return // one field line
		}
		for _, h := range appendForwarded(nil, line) {
			if h.ok && !mentions(line, h.addr) {
				t.Fatalf("appendForwarded(%q) read %v, which the line does not hold", line, h.addr)
			}
		}
		hops := appendForwarded(nil, line+", "+appended)
		if len(hops) == 0 {
			t.Fatalf("appendForwarded(%q + %q): no hop", line, appended)
		}
		if last := hops[len(hops)-1]; last.ok && last.addr != want {
			t.Fatalf("appendForwarded(%q + %q): last hop %v, want %v or unreadable", line, appended, last.addr, want)
		}
	})
}

// Behind a trusted proxy that appends its peer to whatever forwarding
// header the client sent (nginx's $proxy_add_x_forwarded_for, or
// "$http_forwarded, for=$remote_addr"), the client is counted under the
// address the proxy appended, or refused: never under the proxy's own
// address nor any other, whatever it sends.
func TestAppendingProxyPropertyClientCannotChooseItsKey(t *testing.T) {
	xff := newTestIdentifier(t, Config{})
	fwd := newTestIdentifier(t, Config{ForwardingHeader: Forwarded})
	proxy := netip.MustParseAddr("10.0.0.1")
	pieces := []string{"for=", "For=", `"`, `\`, ",", ";", " ", "=", "[", "]", ":", "_x", "unknown", "proto=https",
		"198.51.100.9", "10.0.0.2", "2001:db8::9", "x", "\t"}
	rapid.Check(t, func(t *rapid.T) {
		var b strings.Builder
		for _, p := range rapid.SliceOfN(rapid.SampledFrom(pieces), 0, 12).Draw(t, "client") {
			b.WriteString(p)
		}
		client := b.String()
		v6 := rapid.Bool().Draw(t, "v6")
		a := netip.AddrFrom4([4]byte{203, 0, 113, byte(rapid.IntRange(1, 254).Draw(t, "host"))})
		node := a.String()
		if v6 {
			a = netip.MustParseAddr(fmt.Sprintf("2001:db8:1::%x", rapid.IntRange(1, 0xffff).Draw(t, "host6")))
			node = `"[` + a.String() + `]"`
		}
		for _, c := range []struct {
			id          *Identifier
			name, added string
		}{{xff, "X-Forwarded-For", a.String()}, {fwd, "Forwarded", "for=" + node}} {
			h := http.Header{}
			v := c.added
			if client != "" {
				v = client + ", " + c.added
			}
			h.Set(c.name, v)
			got, err := c.id.ClientIP(proxy, h)
			if err != nil {
				if !errors.Is(err, ErrBadForwarding) {
					t.Fatalf("%s: %q: %v", c.name, v, err)
				}
				continue
			}
			if got != a {
				t.Fatalf("%s: %q: client %v, want %v (the address the proxy appended) or a refusal", c.name, v, got, a)
			}
		}
	})
}

// mentions reports whether a, or its IPv4-mapped form, is written in the
// header text h.
func mentions(h string, a netip.Addr) bool {
	h = strings.ReplaceAll(h, `\`, "")
	for _, f := range strings.FieldsFunc(h, func(c rune) bool { return strings.ContainsRune(",;\"[]= \t\n", c) }) {
		cands := []string{f}
		if host, _, ok := strings.Cut(f, ":"); ok {
			cands = append(cands, host)
		}
		for _, c := range cands {
			if b, err := netip.ParseAddr(c); err == nil && b.Unmap() == a {
				return true
			}
		}
	}
	return false
}

func BenchmarkKey(b *testing.B) {
	id := newTestIdentifier(b, Config{})
	cases := []struct {
		name, scope, remote string
		headers             []string
	}{
		{"user", "user", "203.0.113.5:1234", []string{"X-User-ID: alice"}},
		{"api_key", "api_key", "203.0.113.5:1234", []string{"X-API-Key: sk_live_0123456789abcdef"}},
		{"ip", "ip", "203.0.113.5:1234", nil},
		{"ip_v6", "ip", "[2001:db8:1:2::7]:1234", nil},
		{"ip_via_proxy", "ip", "10.0.0.1:1234", []string{"X-Forwarded-For: 1.1.1.1, 198.51.100.1, 10.0.0.2"}},
		{"anonymous_via_forwarded", "user", "10.0.0.1:1234", []string{`Forwarded: for="[2001:db8:cafe::17]:4711", for=10.0.0.2;proto=https`}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			r := request(c.remote, c.headers...)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := keyOf(id, r, c.scope); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
