package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/bolt"
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/engine"
)

// /healthz and the gRPC health service follow the engine's durable store:
// not ready, naming the error, while its writes fail; ready again, by
// themselves, once a write succeeds.
func TestHealthFollowsTheStore(t *testing.T) {
	dir := t.TempDir()
	st, err := bolt.Open(dir, &bolt.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	b, f := faulty.Wrap(st)
	eng, err := engine.New(b, &engine.Options{FlushInterval: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	statuses := make(chan bool, 10)
	gh := &grpcHealth{eng: eng, set: func(serving bool) { statuses <- serving }}
	gh.markReady()
	if !<-statuses {
		t.Fatal("gRPC health: not serving before any failure")
	}
	check := func(want int, wantBody string) {
		t.Helper()
		rec := httptest.NewRecorder()
		healthz(eng)(rec, httptest.NewRequest("GET", "/healthz", nil))
		if rec.Code != want || !strings.Contains(rec.Body.String(), wantBody) {
			t.Fatalf("/healthz = %d %q, want %d and %q", rec.Code, rec.Body.String(), want, wantBody)
		}
	}
	check(http.StatusOK, "ok")

	id, err := f.Add(faulty.Rule{Ops: []faulty.Op{faulty.OpWriteBatch}, Err: faulty.ErrInjected})
	if err != nil {
		t.Fatal(err)
	}
	l := engine.Limit{Namespace: "n", Algorithm: algo.MustNew("token_bucket", algo.Params{Limit: 100, Window: time.Minute})}
	for eng.StoreHealth() == nil {
		eng.Apply(context.Background(), l, "k", 1)
		time.Sleep(time.Millisecond)
	}
	check(http.StatusServiceUnavailable, "not ready: ")
	check(http.StatusServiceUnavailable, faulty.ErrInjected.Error())
	gh.update()
	if <-statuses {
		t.Fatal("gRPC health: serving while the store fails to write")
	}

	f.Remove(id)
	for eng.StoreHealth() != nil {
		time.Sleep(time.Millisecond)
	}
	check(http.StatusOK, "ok")
	gh.update()
	if !<-statuses {
		t.Fatal("gRPC health: not serving once the store writes again")
	}
}
