package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
)

// A flood of distinct identity header values of any length, through a real
// HTTP server, stores no caller key over identity.MaxKeyLen bytes: user
// ids up to identity.MaxUserIDLen are kept (200), longer ones refused (400)
// and never stored, and API keys of any accepted length are kept as their
// fixed-size hash. The stored records are counted on the real Pebble store
// after the engine has flushed them.
func TestIdentityFloodStoresBoundedKeys(t *testing.T) {
	dir := t.TempDir()
	store, err := pebble.Open(dir, &pebble.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	clock := engine.NewFakeClock(mwT0)
	eng, err := engine.New(store, &engine.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	userRule := sluice.Rule{Name: "u", PathPrefix: "/u", Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 5, Window: 24 * 3600e9}
	keyRule := sluice.Rule{Name: "k", PathPrefix: "/k", Scope: sluice.ScopeAPIKey, Algorithm: "token_bucket", Limit: 5, Window: 24 * 3600e9}
	rs, err := sluice.NewRuleset([]sluice.Rule{userRule, keyRule}, nil, sluice.MatchMostSpecific)
	if err != nil {
		t.Fatal(err)
	}
	id, err := identity.New(identity.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := New(Config{Engine: eng, Registry: sluice.NewRegistry(rs), Identifier: id})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer srv.Close()

	// value returns the i-th distinct value of n bytes.
	value := func(i, n int) string {
		s := fmt.Sprintf("%d-", i)
		return s + strings.Repeat("v", max(0, n-len(s)))
	}
	const each = 150
	sent := map[string]int{} // path → accepted
	for i := range each {
		for _, c := range []struct {
			path, header string
			n, want      int
		}{
			{"/u", "X-User-ID", 1 + i*identity.MaxUserIDLen/each, 200},
			{"/u", "X-User-ID", identity.MaxUserIDLen + 1 + i*512, 400},
			{"/k", "X-API-Key", 8 + i*(identity.MaxAPIKeyLen-8)/each, 200},
			{"/k", "X-API-Key", identity.MaxAPIKeyLen + 1 + i*512, 400},
		} {
			v := value(i, c.n)
			if len(v) != c.n && c.n > 10 {
				t.Fatalf("value of %d bytes, want %d", len(v), c.n)
			}
			resp := doHTTP(t, srv, "GET", c.path, c.header, v)
			readBody(t, resp)
			if resp.StatusCode != c.want {
				t.Fatalf("%s of %d bytes: %d, want %d", c.header, len(v), resp.StatusCode, c.want)
			}
			if c.want == 200 {
				sent[c.path]++
			}
		}
	}
	if err := eng.Close(); err != nil { // flushes every record to the store
		t.Fatal(err)
	}
	store, err = pebble.Open(dir, &pebble.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var records, keyBytes, longest int
	if err := store.Range(nil, func(r backend.Record) bool {
		ns, key, ok := engine.SplitKey(r.Key)
		if !ok {
			t.Errorf("a key that does not split: %q", r.Key)
			return true
		}
		records++
		keyBytes += len(r.Key)
		longest = max(longest, len(key))
		if len(key) > identity.MaxKeyLen {
			t.Errorf("rule %s stores a caller key of %d bytes, over identity.MaxKeyLen %d", ns, len(key), identity.MaxKeyLen)
		}
		if ns == "k" && len(key) != len("key:")+32 {
			t.Errorf("an API key is stored as %d bytes, not its 36-byte hash", len(key))
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if want := sent["/u"] + sent["/k"]; records != want {
		t.Errorf("%d records stored, want %d: one per accepted caller, none for a refused one", records, want)
	}
	bound := records * (2 + identity.MaxKeyLen)
	t.Logf("%d records, %d bytes of stored keys (bound %d), longest caller key %d bytes", records, keyBytes, bound, longest)
	if keyBytes > bound {
		t.Errorf("%d bytes of stored keys for %d records, over %d", keyBytes, records, bound)
	}
}

// A log line about a request quotes a few hundred bytes of its path and of
// an IdentityFunc error that quotes the request, however long they are.
func TestLogLinesAreBounded(t *testing.T) {
	f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{identify: func(r *http.Request) (identity.Caller, error) {
		return identity.Caller{}, errors.New("no session for token " + r.Header.Get("X-Token"))
	}})
	srv := httptest.NewServer(f.handler)
	defer srv.Close()
	path := "/api/orders/" + strings.Repeat("p", 400<<10)
	resp := doHTTP(t, srv, "POST", path, "X-Token", strings.Repeat("t", 200<<10))
	readBody(t, resp)
	if resp.StatusCode != 500 {
		t.Fatalf("an IdentityFunc error: %d, want 500", resp.StatusCode)
	}
	logs := f.logs.String()
	if len(logs) > 2<<10 || !strings.Contains(logs, "cannot identify the caller") {
		t.Fatalf("%d bytes logged for a request with a 400 KiB path, want one line of at most 2 KiB: %.600s", len(logs), logs)
	}
	for _, want := range []string{"bytes)", fmt.Sprintf("(%d bytes)", len(path))} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q: %s", want, logs)
		}
	}
}
