package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// server answers /ok with 200, /fail with 503, /limited with 429 and a
// Retry-After header, /bare429 with 429 and none, /drop by closing the
// connection without an answer, and /slow after 20ms. It counts the
// requests it saw per X-Caller header.
type server struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string]int
}

func newServer(t *testing.T) *server {
	t.Helper()
	s := &server{seen: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen[r.Header.Get("X-Caller")]++
		s.mu.Unlock()
		switch r.URL.Path {
		case "/ok":
			io.WriteString(w, "ok")
		case "/fail":
			http.Error(w, "down", http.StatusServiceUnavailable)
		case "/limited":
			w.Header().Set("Retry-After", "3")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case "/bare429":
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case "/drop":
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		case "/slow":
			time.Sleep(20 * time.Millisecond)
			io.WriteString(w, "slow")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func header(caller string) http.Header {
	return http.Header{"X-Caller": []string{caller}}
}

// Every request is counted once: by status, by caller, and the totals
// agree with what the server saw; a 5xx is counted as a 5xx.
func TestRunCountsAddUp(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	paths := []string{"/ok", "/ok", "/fail", "/limited", "/bare429"}
	callers := []string{"alice", "bob", "carol"}
	res, err := Run(context.Background(), Config{
		BaseURL:  s.URL,
		Workers:  4,
		Requests: 300,
		Factory: func(_, seq int) Request {
			c := callers[seq%len(callers)]
			return Request{Path: paths[seq%len(paths)], Header: header(c), Caller: c}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Requests, 300; got != want {
		t.Errorf("Requests = %d, want %d", got, want)
	}
	for code, want := range map[int]int{200: 120, 503: 60, 429: 120} {
		if got := res.Status(code); got != want {
			t.Errorf("Status(%d) = %d, want %d", code, got, want)
		}
	}
	if got, want := res.Class(5), 60; got != want {
		t.Errorf("Class(5) = %d, want %d", got, want)
	}
	if got, want := res.Class(2), 120; got != want {
		t.Errorf("Class(2) = %d, want %d", got, want)
	}
	if got, want := res.NoRetryAfter, 60; got != want {
		t.Errorf("NoRetryAfter = %d, want %d", got, want)
	}
	if res.Errors != 0 {
		t.Errorf("Errors = %d, want 0: %v", res.Errors, res.ErrorSample)
	}
	if got, want := len(res.Latencies), 300; got != want {
		t.Errorf("%d latencies, want %d", got, want)
	}
	for _, c := range callers {
		cs := res.ByCaller[c]
		if cs == nil {
			t.Fatalf("no counts for caller %q", c)
		}
		sum := 0
		for _, n := range cs.ByStatus {
			sum += n
		}
		if sum != 100 || s.seen[c] != 100 {
			t.Errorf("caller %s: %d answers counted, server saw %d, want 100 each", c, sum, s.seen[c])
		}
	}
	// The expected counts per caller and status, from the same sequence.
	want := map[string]map[int]int{}
	for seq := range 300 {
		c := callers[seq%len(callers)]
		code := map[string]int{"/ok": 200, "/fail": 503, "/limited": 429, "/bare429": 429}[paths[seq%len(paths)]]
		if want[c] == nil {
			want[c] = map[int]int{}
		}
		want[c][code]++
	}
	for c, codes := range want {
		for code, n := range codes {
			if got := res.ByCaller[c].ByStatus[code]; got != n {
				t.Errorf("caller %s status %d: %d, want %d", c, code, got, n)
			}
		}
	}
}

// A request that gets no answer is a transport error, counted apart from
// the status codes and against its caller.
func TestRunCountsTransportErrors(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	res, err := Run(context.Background(), Config{
		BaseURL:  s.URL,
		Workers:  2,
		Requests: 40,
		Factory: func(_, seq int) Request {
			if seq%4 == 0 {
				return Request{Path: "/drop", Caller: "dropped"}
			}
			return Request{Path: "/ok", Caller: "fine"}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Errors, 10; got != want {
		t.Errorf("Errors = %d, want %d", got, want)
	}
	if got, want := res.Status(200), 30; got != want {
		t.Errorf("Status(200) = %d, want %d", got, want)
	}
	if got, want := res.Requests, 40; got != want {
		t.Errorf("Requests = %d, want %d", got, want)
	}
	if got := res.ByCaller["dropped"].Errors; got != 10 {
		t.Errorf("caller dropped: %d errors, want 10", got)
	}
	if len(res.ErrorSample) == 0 {
		t.Error("no error message kept")
	}
	if got, want := len(res.Latencies), 30; got != want {
		t.Errorf("%d latencies, want %d (errors are not timed)", got, want)
	}
}

// With a deadline and no count, the run stops at the deadline: with two
// workers and 20ms answers, 300ms holds about 30 requests, never 1000.
func TestRunDeadlineStops(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	began := time.Now()
	res, err := Run(context.Background(), Config{
		BaseURL:  s.URL,
		Workers:  2,
		Duration: 300 * time.Millisecond,
		Factory:  func(_, _ int) Request { return Request{Path: "/slow"} },
	})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	if took < 300*time.Millisecond || took > 2*time.Second {
		t.Errorf("run took %v, want about 300ms", took)
	}
	if res.Requests < 4 || res.Requests > 32 {
		t.Errorf("Requests = %d, want between 4 and 32 (2 workers × 300ms / 20ms)", res.Requests)
	}
	if res.Status(200) != res.Requests {
		t.Errorf("%d of %d answered 200", res.Status(200), res.Requests)
	}
}

// The count bound ends the run even with a long deadline, and Pace bounds
// the rate: 2 workers at one request per 50ms each send 10 requests in
// about 225ms, not at once.
func TestRunPaceAndCount(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	began := time.Now()
	res, err := Run(context.Background(), Config{
		BaseURL:  s.URL,
		Workers:  2,
		Requests: 10,
		Duration: time.Minute,
		Pace:     50 * time.Millisecond,
		Factory:  func(_, _ int) Request { return Request{Path: "/ok"} },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 10 {
		t.Errorf("Requests = %d, want 10", res.Requests)
	}
	if took := time.Since(began); took < 200*time.Millisecond || took > 5*time.Second {
		t.Errorf("10 paced requests took %v, want about 250ms", took)
	}
}

// A cancelled context stops the run and its error is returned; cancelled
// requests are not transport errors.
func TestRunCancel(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	res, err := Run(ctx, Config{
		BaseURL:  s.URL,
		Workers:  2,
		Duration: time.Minute,
		Factory:  func(_, _ int) Request { return Request{Path: "/slow"} },
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if res == nil || res.Errors != 0 {
		t.Fatalf("result %+v: want one with no transport errors", res)
	}
}

// Percentiles by nearest rank over a known set: 1ms … 100ms.
func TestPercentile(t *testing.T) {
	t.Parallel()
	var set []time.Duration
	for i := 1; i <= 100; i++ {
		set = append(set, time.Duration(i)*time.Millisecond)
	}
	r := &Result{Latencies: set}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{
		{50, 50 * time.Millisecond},
		{90, 90 * time.Millisecond},
		{99, 99 * time.Millisecond},
		{99.9, 100 * time.Millisecond},
		{100, 100 * time.Millisecond},
		{0.5, 1 * time.Millisecond},
		{0, 0},
		{101, 0},
	} {
		if got := r.Percentile(tc.p); got != tc.want {
			t.Errorf("Percentile(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got, want := r.Max(), 100*time.Millisecond; got != want {
		t.Errorf("Max = %v, want %v", got, want)
	}
	// A small odd set: 3 values.
	small := []time.Duration{10, 20, 30}
	for p, want := range map[float64]time.Duration{33: 10, 34: 20, 50: 20, 67: 30, 99: 30} {
		if got := Percentile(small, p); got != want {
			t.Errorf("Percentile(%v of 10,20,30) = %v, want %v", p, got, want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile of nothing = %v, want 0", got)
	}
}

// Merge adds two rounds' counts and keeps the latencies sorted.
func TestMerge(t *testing.T) {
	t.Parallel()
	a := &Result{Requests: 2, ByStatus: map[int]int{200: 2}, Latencies: []time.Duration{1, 5}, Elapsed: time.Second,
		ByCaller: map[string]*CallerStats{"x": {ByStatus: map[int]int{200: 2}}}}
	b := &Result{Requests: 3, Errors: 1, ByStatus: map[int]int{200: 1, 429: 1}, Latencies: []time.Duration{2, 3}, Elapsed: time.Second,
		ByCaller: map[string]*CallerStats{"x": {ByStatus: map[int]int{429: 1}, Errors: 1}}}
	var m Result
	m.Merge(a)
	m.Merge(b)
	if m.Requests != 5 || m.Errors != 1 || m.Status(200) != 3 || m.Status(429) != 1 {
		t.Errorf("merged counts %+v", m)
	}
	if got := fmt.Sprint(m.Latencies); got != "[1ns 2ns 3ns 5ns]" {
		t.Errorf("merged latencies %s, want sorted", got)
	}
	if x := m.ByCaller["x"]; x.ByStatus[200] != 2 || x.ByStatus[429] != 1 || x.Errors != 1 {
		t.Errorf("merged caller x %+v", x)
	}
	if m.Elapsed != 2*time.Second || m.RPS() != 2 {
		t.Errorf("Elapsed %v, RPS %v; want 2s and 2/s", m.Elapsed, m.RPS())
	}
}

// A Config Run cannot run is an error naming what is wrong, not a panic or
// an endless run.
func TestRunBadConfig(t *testing.T) {
	t.Parallel()
	f := func(_, _ int) Request { return Request{Path: "/"} }
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"unbounded", Config{BaseURL: "http://x", Workers: 1, Factory: f}, "unbounded"},
		{"no workers", Config{BaseURL: "http://x", Requests: 1, Factory: f}, "Workers"},
		{"no factory", Config{BaseURL: "http://x", Workers: 1, Requests: 1}, "Factory"},
		{"bad url", Config{BaseURL: "127.0.0.1:80", Workers: 1, Requests: 1, Factory: f}, "BaseURL"},
		{"negative count", Config{BaseURL: "http://x", Workers: 1, Requests: -1, Factory: f}, "negative"},
		{"negative pace", Config{BaseURL: "http://x", Workers: 1, Requests: 1, Pace: -1, Factory: f}, "Pace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}
