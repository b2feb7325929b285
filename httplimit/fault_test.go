package httplimit

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/metrics"
)

// pebbleServer serves the middleware over an engine on the Pebble store in
// dir, wrapped so the test can break it, behind a real HTTP listener.
type pebbleServer struct {
	srv     *httptest.Server
	eng     *engine.Engine
	faults  *faulty.Faults
	metrics *metrics.Metrics
	calls   atomic.Int64
}

func newPebbleServer(t *testing.T, dir string, mode engine.Durability, policy sluice.StoreErrorPolicy) *pebbleServer {
	t.Helper()
	s, err := pebble.Open(dir, &pebble.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	b, faults := faulty.Wrap(s)
	eng, err := engine.New(b, &engine.Options{Clock: engine.NewFakeClock(mwT0), Durability: mode})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := sluice.NewRuleset([]sluice.Rule{ordersRule}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := identity.New(identity.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ps := &pebbleServer{eng: eng, faults: faults, metrics: metrics.New(nil)}
	mw, err := New(Config{
		Engine: eng, Registry: sluice.NewRegistry(rs), Identifier: id, Metrics: ps.metrics,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), OnStoreError: policy,
	})
	if err != nil {
		t.Fatal(err)
	}
	ps.srv = httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps.calls.Add(1)
		io.WriteString(w, "ok")
	})))
	t.Cleanup(ps.srv.Close)
	return ps
}

// TestStorePolicyOverPebble: a real store failing under the middleware, over
// real HTTP. A Sync-mode commit that fails, or a cold load that fails in
// Interval mode, is a store error: fail-open passes the request to the
// handler and counts it, fail-closed answers 503 and never calls the
// handler. Once the store heals, limiting resumes (429 with an integer
// Retry-After), and after a restart the spending of every passed request is
// still there.
func TestStorePolicyOverPebble(t *testing.T) {
	for _, fault := range []struct {
		name string
		mode engine.Durability
		op   faulty.Op
	}{
		{"commit", engine.Sync, faulty.OpWriteBatch},
		{"cold-load", engine.Interval, faulty.OpLoad},
	} {
		for _, policy := range []sluice.StoreErrorPolicy{sluice.FailOpen, sluice.FailClosed} {
			t.Run(fault.name+"/"+string(policy), func(t *testing.T) {
				dir := t.TempDir()
				ps := newPebbleServer(t, dir, fault.mode, policy)
				if _, err := ps.faults.Add(faulty.Rule{Ops: []faulty.Op{fault.op}, Err: errDiskOnFire}); err != nil {
					t.Fatal(err)
				}
				const broken = 2
				for range broken {
					resp := doHTTP(t, ps.srv, "POST", "/api/orders", "X-User-ID", "hana")
					body := readBody(t, resp)
					want := http.StatusOK
					if policy == sluice.FailClosed {
						want = http.StatusServiceUnavailable
					}
					if resp.StatusCode != want {
						t.Fatalf("store down, policy %s: %d %q, want %d", policy, resp.StatusCode, body, want)
					}
				}
				snap := ps.metrics.Snapshot()
				if policy == sluice.FailOpen && (snap.StoreErrorsOpen != broken || ps.calls.Load() != broken) {
					t.Fatalf("open: %d store errors counted, handler called %d times; want %d and %d", snap.StoreErrorsOpen, ps.calls.Load(), broken, broken)
				}
				if policy == sluice.FailClosed && (snap.StoreErrorsClosed != broken || ps.calls.Load() != 0) {
					t.Fatalf("closed: %d store errors counted, handler called %d times; want %d and 0", snap.StoreErrorsClosed, ps.calls.Load(), broken)
				}
				if got := ps.eng.Stats().StoreErrors; got != broken {
					t.Fatalf("engine StoreErrors = %d, want %d", got, broken)
				}

				ps.faults.Clear()
				// A failed Sync commit keeps its spending in memory (no
				// refund) and commits it with the next one; a failed
				// load spent nothing.
				left := ordersRule.Limit
				if fault.mode == engine.Sync {
					left -= broken
				}
				for i := range left {
					resp := doHTTP(t, ps.srv, "POST", "/api/orders", "X-User-ID", "hana")
					readBody(t, resp)
					if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != strconv.FormatInt(left-1-i, 10) {
						t.Fatalf("healed, request %d: %d remaining %q, want 200 and %d", i, resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), left-1-i)
					}
				}
				resp := doHTTP(t, ps.srv, "POST", "/api/orders", "X-User-ID", "hana")
				readBody(t, resp)
				if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != 429 || err != nil || ra < 1 {
					t.Fatalf("over the limit: %d, Retry-After %q; want 429 and an integer >= 1", resp.StatusCode, resp.Header.Get("Retry-After"))
				}
				if err := ps.eng.Close(); err != nil {
					t.Fatal(err)
				}
				ps = newPebbleServer(t, dir, fault.mode, policy)
				defer ps.eng.Close()
				resp = doHTTP(t, ps.srv, "POST", "/api/orders", "X-User-ID", "hana")
				readBody(t, resp)
				if resp.StatusCode != 429 {
					t.Fatalf("after a restart: %d, want 429 (the spending reached the disk)", resp.StatusCode)
				}
			})
		}
	}
}
