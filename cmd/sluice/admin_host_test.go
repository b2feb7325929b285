package main

import (
	"net"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// testGuard is the guard of an admin listener on 127.0.0.1 with one
// configured name.
func testGuard(t testing.TB) adminGuard {
	ln, g, err := listenAdmin("127.0.0.1:0", "", []string{"sluice-admin.internal"})
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	return g
}

func TestAdminHostAllowed(t *testing.T) {
	g := testGuard(t)
	for host, want := range map[string]bool{
		"":                            true, // HTTP/1.0: no browser
		"127.0.0.1:9090":              true,
		"127.0.0.1":                   true,
		"[::1]:9090":                  true,
		"10.1.2.3:9090":               true,
		"localhost:9090":              true,
		"LocalHost.":                  true,
		"sluice-admin.internal:9090":  true,
		"SLUICE-ADMIN.internal.":      true,
		"evil.example:9090":           false,
		"evil.example":                false,
		"localhost.evil.example:9090": false,
		"x.sluice-admin.internal":     false,
		"127.0.0.1.evil.example":      false,
		"[evil.example]:9090":         false,
	} {
		r := httptest.NewRequest("GET", "/rules", nil)
		r.Host = host
		if got := g.hostAllowed(r); got != want {
			t.Errorf("Host %q: allowed %v, want %v", host, got, want)
		}
	}
}

// The Host check never panics, and lets through only an IP literal,
// localhost or a configured name, with or without a port.
func FuzzAdminHost(f *testing.F) {
	for _, s := range []string{"127.0.0.1:9090", "evil.example:9090", "[::1]:1", "localhost.", "sluice-admin.internal", "[", "]:", ":", "%", "[fe80::1%25eth0]:80"} {
		f.Add(s)
	}
	g := testGuard(f)
	f.Fuzz(func(t *testing.T, host string) {
		r := httptest.NewRequest("GET", "/rules", nil)
		r.Host = host
		if !g.hostAllowed(r) || host == "" {
			return
		}
		h := host
		if hh, _, err := net.SplitHostPort(h); err == nil {
			h = hh
		}
		h = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), ".")
		if _, err := netip.ParseAddr(h); err == nil {
			return
		}
		switch strings.ToLower(h) {
		case "localhost", "sluice-admin.internal", "127.0.0.1":
			return
		}
		t.Fatalf("Host %q allowed: not an IP address, localhost nor a configured name", host)
	})
}
