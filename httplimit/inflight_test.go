package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/httplimit"
)

// inFlightServer serves a handler behind an InFlight of limit slots per
// X-Key: the handler announces each request on entered, then waits for a
// value on leave or for its client to go away, and reports on left.
func inFlightServer(t *testing.T, limit int64) (srv *httptest.Server, f *httplimit.InFlight, entered, left chan struct{}, leave chan struct{}) {
	t.Helper()
	eng, err := engine.New(memory.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	f, err = httplimit.NewInFlight(httplimit.InFlightConfig{
		Engine:     eng,
		Limit:      engine.Limit{Namespace: "inflight", Algorithm: algo.MustNew(algo.ConcurrencyName, algo.Params{Limit: limit, Window: time.Minute})},
		Key:        func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil },
		RetryAfter: 1500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	entered, left, leave = make(chan struct{}, 16), make(chan struct{}, 16), make(chan struct{}, 16)
	srv = httptest.NewServer(f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { left <- struct{}{} }()
		w.Write([]byte("first chunk\n"))
		w.(http.Flusher).Flush() // a streamed response: the slot is held past its first bytes
		entered <- struct{}{}
		select {
		case <-leave:
			w.Write([]byte("last chunk\n"))
		case <-r.Context().Done():
		}
	})))
	t.Cleanup(srv.Close)
	return srv, f, entered, left, leave
}

func getKey(t *testing.T, ctx context.Context, url, key string) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("X-Key", key)
	return http.DefaultClient.Do(req)
}

// TestInFlightHoldsForTheExchange: two streaming requests hold both slots
// of their key until their responses end; a third is answered 429 at once
// with the configured Retry-After, while they still stream (nothing
// queues), and another key is not affected; once one response ends, its
// slot is free again.
func TestInFlightHoldsForTheExchange(t *testing.T) {
	srv, f, entered, left, leave := inFlightServer(t, 2)
	ctx := context.Background()
	bodies := make(chan error, 2)
	for range 2 {
		go func() {
			resp, err := getKey(t, ctx, srv.URL, "a")
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			bodies <- err
		}()
	}
	<-entered
	<-entered
	if f.Held() != 2 {
		t.Fatalf("Held() = %d while two stream", f.Held())
	}
	resp, err := getKey(t, ctx, srv.URL, "a")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "2" {
		t.Fatalf("third request: %d, Retry-After %q; want 429 with 2", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	go func() {
		resp, err := getKey(t, ctx, srv.URL, "b")
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-entered // another key has slots of its own
	leave <- struct{}{}
	<-left
	leave <- struct{}{}
	<-left
	leave <- struct{}{}
	<-left
	for range 2 {
		if err := <-bodies; err != nil {
			t.Fatal(err)
		}
	}
	if f.Held() != 0 {
		t.Fatalf("Held() = %d after every response ended", f.Held())
	}
	go func() {
		resp, err := getKey(t, ctx, srv.URL, "a")
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	leave <- struct{}{}
	<-left
}

// TestInFlightClientHangsUp: a client that goes away mid-response frees
// its slot as soon as the handler returns, not at the maximum hold.
func TestInFlightClientHangsUp(t *testing.T) {
	srv, _, entered, left, leave := inFlightServer(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		resp, err := getKey(t, ctx, srv.URL, "a")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	<-entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the hung-up client's request: %v", err)
	}
	<-left // the handler saw the client go; the slot is given back as it returns
	var resp *http.Response
	var err error
	for {
		// The release follows the handler's return on the server's
		// goroutine: retry until it has landed (a 429 until then).
		resp, err = getKey(t, context.Background(), srv.URL+"/again", "a")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusTooManyRequests {
			break
		}
		resp.Body.Close()
	}
	defer resp.Body.Close()
	<-entered
	leave <- struct{}{}
	<-left
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after the hang-up: %d", resp.StatusCode)
	}
}

func TestNewInFlightRefuses(t *testing.T) {
	eng, _ := engine.New(memory.New(nil), nil)
	defer eng.Close()
	if _, err := httplimit.NewInFlight(httplimit.InFlightConfig{Engine: eng, Limit: engine.Limit{Namespace: "x", Algorithm: algo.MustNew(algo.GCRAName, algo.Params{Limit: 1, Window: time.Second})}}); err == nil {
		t.Fatal("a rate limit was taken for a concurrency limit")
	}
	if _, err := httplimit.NewInFlight(httplimit.InFlightConfig{Limit: engine.Limit{Namespace: "x", Algorithm: algo.MustNew(algo.ConcurrencyName, algo.Params{Limit: 1, Window: time.Second})}}); err == nil {
		t.Fatal("no engine")
	}
}
