package fuzz

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/metrics"
)

// FuzzGateway: any configuration that parses is compiled and put in front of
// a handler, over a memory engine, exactly as the serve command does; then a
// request of any method, path, identity and forwarding headers and peer
// address is sent through it several times. Nothing panics; every answer is
// 200, 400 or 429 (503 only under on_store_error: closed; 500 only when the
// peer address is not ip:port, as no TCP connection's is); every 429 has an
// integer Retry-After of at least 1; X-RateLimit-Remaining, when set, is an
// integer within 0..X-RateLimit-Limit.
func FuzzGateway(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join("..", "testdata", "gateway.yaml")); err == nil {
		f.Add(data, "POST", "/api/orders", "", "", "frank", "", "192.0.2.1:1234", uint8(7))
		f.Add(data, "GET", "/api/search?q=1", "203.0.113.9, 127.0.0.1", "", "", "key-1", "127.0.0.1:80", uint8(3))
		f.Add(data, "GET", "/", "", `for="[2001:db8::1]:443";proto=https`, "", "", "127.0.0.1:9", uint8(120))
		// The example with its proxy line in force, under either header.
		proxied := []byte(strings.Replace(string(data), "# trusted_proxies: [10.0.0.2]", "trusted_proxies: [127.0.0.1]", 1))
		f.Add(proxied, "GET", "/api/search?q=1", "203.0.113.9, 127.0.0.1", "for=198.51.100.7", "", "key-1", "127.0.0.1:80", uint8(3))
		fwd := []byte(strings.Replace(string(proxied), "ipv6_prefix: 64", "forwarding_header: forwarded", 1))
		f.Add(fwd, "GET", "/", "198.51.100.7", `for="[2001:db8::1]:443";proto=https`, "", "", "127.0.0.1:9", uint8(120))
	} else {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, doc []byte, method, path, xff, forwarded, user, apiKey, peer string, repeat uint8) {
		cfg, err := config.Parse("fuzz.yaml", doc)
		if err != nil {
			if !errors.Is(err, sluice.ErrInvalidConfig) {
				t.Fatalf("ParseConfig error %q does not match ErrInvalidConfig", err)
			}
			return
		}
		rs, err := cfg.Ruleset()
		if err != nil {
			t.Fatalf("a parsed configuration does not compile: %v", err)
		}
		// The store section is not opened: a fuzzed directory is no place
		// to write. The middleware runs over memory.
		eng, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: engine.NewFakeClock(time.Unix(1_700_000_040, 0))})
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		id, err := identity.New(cfg.Identity)
		if err != nil {
			t.Fatalf("a parsed identity section is refused: %v", err)
		}
		mw, err := httplimit.New(httplimit.Config{
			Engine: eng, Registry: sluice.NewRegistry(rs), Identifier: id, Metrics: metrics.New(nil),
			OnStoreError: cfg.OnStoreError, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatalf("a parsed configuration is refused by the middleware: %v", err)
		}
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))

		u, err := url.ParseRequestURI(path)
		if err != nil {
			u = &url.URL{Path: path}
		}
		// A leaky-bucket request told to wait would sleep for real: the
		// context is already done, so the middleware stops waiting at once.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		// net/http gives every TCP request a peer of the form ip:port;
		// with anything else an IP-scoped rule cannot tell who is asking,
		// which the middleware answers as an internal error (500).
		_, perr := netip.ParseAddrPort(peer)
		validPeer := perr == nil
		for i := range int(repeat%16) + 1 {
			r := (&http.Request{
				Method: method, URL: u, RequestURI: path, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{}, Host: "example.test", RemoteAddr: peer, Body: http.NoBody,
			}).WithContext(ctx)
			for k, v := range map[string]string{
				"X-Forwarded-For": xff, "Forwarded": forwarded,
				cfg.Identity.UserHeader: user, cfg.Identity.APIKeyHeader: apiKey,
			} {
				if v != "" {
					r.Header.Set(k, v)
				}
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			checkAnswer(t, i, w, cfg.OnStoreError, validPeer)
		}
	})
}

func checkAnswer(t *testing.T, i int, w *httptest.ResponseRecorder, policy sluice.StoreErrorPolicy, validPeer bool) {
	t.Helper()
	switch w.Code {
	case http.StatusOK, http.StatusBadRequest, http.StatusTooManyRequests:
	case http.StatusInternalServerError:
		if validPeer {
			t.Fatalf("request %d: 500 from a peer with an ip:port address: %q", i, w.Body.String())
		}
	case http.StatusServiceUnavailable:
		if policy != sluice.FailClosed {
			t.Fatalf("request %d: 503 under on_store_error %q", i, policy)
		}
	default:
		t.Fatalf("request %d: status %d, want 200, 400, 429 or 503: %q", i, w.Code, w.Body.String())
	}
	if w.Code == http.StatusTooManyRequests {
		ra := w.Header().Get("Retry-After")
		if n, err := strconv.ParseInt(ra, 10, 64); err != nil || n < 1 {
			t.Fatalf("request %d: 429 with Retry-After %q, want an integer >= 1", i, ra)
		}
	}
	if rem := w.Header().Get("X-RateLimit-Remaining"); rem != "" {
		n, err1 := strconv.ParseInt(rem, 10, 64)
		limit, err2 := strconv.ParseInt(w.Header().Get("X-RateLimit-Limit"), 10, 64)
		if err1 != nil || err2 != nil || n < 0 || n > limit {
			t.Fatalf("request %d: X-RateLimit-Remaining %q, X-RateLimit-Limit %q: want 0 <= remaining <= limit",
				i, rem, w.Header().Get("X-RateLimit-Limit"))
		}
	}
}
