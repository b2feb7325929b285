package httplimit_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/metrics"
)

// slotsServer serves a streaming handler behind the rules middleware with
// rules (match: all): the handler announces each request on entered, then
// waits for a value on leave or for its client to go away. done hears of
// each request once the middleware has returned (its slots given back).
func slotsServer(t *testing.T, rules []sluice.Rule) (srv *httptest.Server, m *metrics.Metrics, entered, leave, done chan struct{}) {
	srv, m, entered, leave, done, _, _ = slotsServerEngine(t, rules)
	return
}

// slotsServerEngine is slotsServer, returning its engine and ruleset too.
func slotsServerEngine(t *testing.T, rules []sluice.Rule) (srv *httptest.Server, m *metrics.Metrics, entered, leave, done chan struct{}, eng *engine.Engine, rs *sluice.Ruleset) {
	t.Helper()
	var err error
	eng, err = engine.New(memory.New(nil), &engine.Options{Clock: engine.NewFakeClock(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	rs, err = sluice.NewRuleset(rules, nil, sluice.MatchAll)
	if err != nil {
		t.Fatal(err)
	}
	m = metrics.New(nil)
	mw, err := httplimit.New(httplimit.Config{Engine: eng, Registry: sluice.NewRegistry(rs), Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	entered, leave, done = make(chan struct{}, 16), make(chan struct{}, 16), make(chan struct{}, 16)
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first chunk\n"))
		w.(http.Flusher).Flush() // streamed: the slot is held past the first bytes
		entered <- struct{}{}
		select {
		case <-leave:
			w.Write([]byte("last chunk\n"))
		case <-r.Context().Done():
		}
	}))
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		done <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	return srv, m, entered, leave, done, eng, rs
}

// chatRules are a concurrency rule of 2 slots per caller (a Retry-After of
// 3 s) and a rate rule of 100 a minute, both on /chat.
var chatRules = []sluice.Rule{
	{Name: "chat-slots", PathPrefix: "/chat", Scope: sluice.ScopeIP, Algorithm: algo.ConcurrencyName, Limit: 2, MaxHold: time.Minute, RetryAfter: 3 * time.Second},
	{Name: "chat-rate", PathPrefix: "/chat", Scope: sluice.ScopeIP, Algorithm: algo.TokenBucketName, Limit: 100, Window: time.Minute},
}

// TestRulesHoldSlotsForTheExchange: through the rules middleware, two
// streaming requests hold both slots until their responses end; a third
// is answered 429 at once with the rule's Retry-After while they stream
// (nothing queues) and its RateLimit fields say no slot is left; a client
// that hangs up frees its slot at once, and the next request is admitted.
// The gauge follows.
func TestRulesHoldSlotsForTheExchange(t *testing.T) {
	srv, m, entered, leave, done := slotsServer(t, chatRules)
	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	streams := make(chan *http.Response, 2)
	for i := range 2 {
		c := context.Background()
		if i == 0 {
			c = ctx // the client that will hang up
		}
		go func() {
			req, _ := http.NewRequestWithContext(c, http.MethodPost, srv.URL+"/chat", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				streams <- nil
				return
			}
			streams <- resp
		}()
	}
	<-entered
	<-entered
	if s, _ := m.Snapshot().Rule("chat-slots"); s.SlotsInUse != 2 {
		t.Errorf("slots in use while two stream: %d, want 2", s.SlotsInUse)
	}
	resp, err := http.Post(srv.URL+"/chat", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	<-done
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "3" {
		t.Fatalf("third: %d Retry-After %q (%s), want 429 and the rule's 3", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if got, want := resp.Header.Get("X-RateLimit-Remaining"), "0"; got != want {
		t.Errorf("third: X-RateLimit-Remaining %q, want %q (no slot free)", got, want)
	}
	if got, want := resp.Header.Get("X-RateLimit-Limit"), "2"; got != want {
		t.Errorf("third: X-RateLimit-Limit %q, want %q (the slots)", got, want)
	}
	// The first client hangs up: its slot comes back once the handler
	// has seen its context end, without the response finishing.
	r0 := <-streams
	r1 := <-streams
	hangUp()
	<-done
	if s, _ := m.Snapshot().Rule("chat-slots"); s.SlotsInUse != 1 {
		t.Errorf("slots in use after the hang-up: %d, want 1", s.SlotsInUse)
	}
	next, err := http.Post(srv.URL+"/chat", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	if next.StatusCode != http.StatusOK || next.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("after the hang-up: %d remaining %q, want 200, 0 slots left", next.StatusCode, next.Header.Get("X-RateLimit-Remaining"))
	}
	leave <- struct{}{}
	leave <- struct{}{}
	for _, r := range []*http.Response{r0, r1, next} {
		if r != nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
	}
	<-done
	<-done
	if s, _ := m.Snapshot().Rule("chat-slots"); s.SlotsInUse != 0 || s.Allowed != 3 || s.Denied != 1 {
		t.Errorf("at the end: %d slots in use, %d allowed, %d denied; want 0, 3, 1", s.SlotsInUse, s.Allowed, s.Denied)
	}
	if s, _ := m.Snapshot().Rule("chat-rate"); s.Allowed != 3 || s.Denied != 0 {
		t.Errorf("chat-rate: %d allowed, %d denied; want 3, 0 (the refused request was not decided by it)", s.Allowed, s.Denied)
	}
}

// TestRulesSlotGivenBackOnARateDenial: a request the rate rule refuses
// holds no slot: the slot it took is given back before the answer.
func TestRulesSlotGivenBackOnARateDenial(t *testing.T) {
	rules := []sluice.Rule{chatRules[0], chatRules[1]}
	rules[1].Limit = 1
	srv, m, entered, leave, done, eng, rs := slotsServerEngine(t, rules)
	first, err := http.Post(srv.URL+"/chat", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	second, err := http.Post(srv.URL+"/chat", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	second.Body.Close()
	<-done
	if second.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second: %d, want 429 (chat-rate)", second.StatusCode)
	}
	// Peek: Remaining is what is left after one more.
	if p, err := eng.Peek(context.Background(), rs.Rule("chat-slots").Limit(), "ip:127.0.0.1", 1); err != nil || !p.Allowed || p.Remaining != 0 {
		t.Errorf("after the rate denial: a slot free %v, %d more (%v); want one free, none more (the first request holds the other)", p.Allowed, p.Remaining, err)
	}
	leave <- struct{}{}
	io.Copy(io.Discard, first.Body)
	first.Body.Close()
	<-done
	if s, _ := m.Snapshot().Rule("chat-slots"); s.SlotsInUse != 0 {
		t.Errorf("slots in use at the end: %d, want 0", s.SlotsInUse)
	}
}
