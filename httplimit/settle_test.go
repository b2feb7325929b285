package httplimit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/metrics"
)

// settleFixture is a middleware with one tokens rule (1000 a minute,
// settled after the response) in front of a handler each test sets.
type settleFixture struct {
	t       *testing.T
	handler http.Handler
	next    http.HandlerFunc
	metrics *metrics.Metrics
}

func newSettleFixture(t *testing.T, s sluice.Settle) *settleFixture {
	t.Helper()
	eng, err := engine.New(memory.New(nil), &engine.Options{Clock: engine.NewFakeClock(mwT0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	rule := sluice.Rule{Name: "tokens", Method: "POST", PathPrefix: "/v1", Scope: sluice.ScopeUser, Algorithm: "sliding_counter",
		Limit: 1000, Window: time.Minute, Cost: 7, Settle: &s}
	rs, err := sluice.NewRuleset([]sluice.Rule{rule}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	f := &settleFixture{t: t, metrics: metrics.New(nil)}
	mw, err := New(Config{Engine: eng, Registry: sluice.NewRegistry(rs), Metrics: f.metrics, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	f.handler = mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { f.next(w, r) }))
	return f
}

// do sends a POST of body as user to the middleware.
func (f *settleFixture) do(ctx context.Context, user, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(ctx, "POST", "/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("X-User-ID", user)
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	return rec
}

// spent returns what user has spent, by a probe request of no estimate
// (the rule's Cost, 7) that its handler answers with no usage.
func (f *settleFixture) spent(user string) int64 {
	f.t.Helper()
	f.next = func(w http.ResponseWriter, r *http.Request) {}
	rec := f.do(context.Background(), user, "")
	n, err := strconv.ParseInt(rec.Header().Get("X-RateLimit-Remaining"), 10, 64)
	if err != nil || rec.Code != 200 {
		f.t.Fatalf("probe: status %d remaining %q", rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	}
	return 1000 - n - 7
}

// sse writes an OpenAI-style stream: two content chunks, the usage chunk
// (when usage >= 0) with empty choices, then [DONE], split into pieces of
// size bytes, each flushed.
func sse(w http.ResponseWriter, usage string, size int) {
	w.Header().Set("Content-Type", "text/event-stream")
	var b strings.Builder
	b.WriteString("data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n")
	b.WriteString("data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\r\n\r\n")
	if usage != "" {
		fmt.Fprintf(&b, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":%s}}\n\n", usage)
	}
	b.WriteString("data: [DONE]\n\n")
	s := b.String()
	for len(s) > 0 {
		n := min(size, len(s))
		io.WriteString(w, s[:n])
		w.(http.Flusher).Flush()
		s = s[n:]
	}
}

// TestSettleFromResponse settles a request estimated from its max_tokens
// with what each kind of response reports, and checks what the caller
// spent.
func TestSettleFromResponse(t *testing.T) {
	body := `{"model":"m","max_tokens":30,"messages":[]}`
	for _, tc := range []struct {
		name    string
		settle  sluice.Settle
		body    string
		handler http.HandlerFunc
		spent   int64
	}{
		{"json usage", sluice.Settle{EstimateField: "max_tokens", EstimateAdd: 10, ActualField: "usage.total_tokens"}, body,
			func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"choices":[],"usage":{"total_tokens":12}}`)
			}, 12},
		{"json usage above the estimate", sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"}, body,
			func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"usage":{"total_tokens":45}}`)
			}, 45},
		{"no usage: the estimate stands", sluice.Settle{EstimateField: "max_tokens", EstimateAdd: 10, ActualField: "usage.total_tokens"}, body,
			func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"choices":[]}`) }, 40},
		{"upstream error: nothing", sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"}, body,
			func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 502) }, 0},
		{"upstream error with usage", sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"}, body,
			func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(400)
				io.WriteString(w, `{"usage":{"total_tokens":5}}`)
			}, 5},
		{"negative usage: the estimate stands", sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"}, body,
			func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"usage":{"total_tokens":-5}}`) }, 30},
		{"fractional usage: the estimate stands", sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"}, body,
			func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"usage":{"total_tokens":5.5}}`) }, 30},
		{"malformed request: the rule's cost", sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"}, `{"max_tokens":`,
			func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `not json`) }, 7},
		{"negative max_tokens: the rule's cost", sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"}, `{"max_tokens":-40}`,
			func(w http.ResponseWriter, r *http.Request) {}, 7},
		{"huge max_tokens: the capacity", sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"}, `{"max_tokens":99999999999999999999999}`,
			func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"usage":{"total_tokens":3}}`) }, 3},
		{"response over max_body: the estimate stands", sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens", MaxBody: 64}, body,
			func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"pad":"`+strings.Repeat("x", 100)+`","usage":{"total_tokens":3}}`)
			}, 30},
		{"header", sluice.Settle{EstimateField: "max_tokens", ActualHeader: "X-Tokens-Used"}, body,
			func(w http.ResponseWriter, r *http.Request) { w.Header().Set("X-Tokens-Used", "9") }, 9},
		{"trailer", sluice.Settle{EstimateField: "max_tokens", ActualTrailer: "X-Tokens-Used"}, body,
			func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "body")
				w.Header().Set(http.TrailerPrefix+"X-Tokens-Used", "11")
			}, 11},
		{"stream", sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"}, body,
			func(w http.ResponseWriter, r *http.Request) { sse(w, "5", 1<<20) }, 5},
		{"stream split byte by byte", sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"}, body,
			func(w http.ResponseWriter, r *http.Request) { sse(w, "5", 1) }, 5},
		{"stream split in sevens", sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"}, body,
			func(w http.ResponseWriter, r *http.Request) { sse(w, "17", 7) }, 17},
		{"stream without usage: the estimate stands", sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"}, body,
			func(w http.ResponseWriter, r *http.Request) { sse(w, "", 5) }, 30},
		{"stream with a line over max_body: the other lines count", sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens", MaxBody: 128}, body,
			func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "data: {\"pad\":\""+strings.Repeat("y", 500)+"\",\"usage\":{\"total_tokens\":900}}\n\n")
				io.WriteString(w, "data: {\"usage\":{\"total_tokens\":8}}\n\ndata: [DONE]\n\n")
				w.(http.Flusher).Flush()
			}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSettleFixture(t, tc.settle)
			var got []byte
			var flushed bool
			f.next = func(w http.ResponseWriter, r *http.Request) {
				got, _ = io.ReadAll(r.Body)
				tc.handler(w, r)
			}
			rec := f.do(context.Background(), "ann", tc.body)
			flushed = rec.Flushed
			if string(got) != tc.body {
				t.Errorf("handler read body %q, want %q", got, tc.body)
			}
			if strings.HasPrefix(tc.name, "stream") && !flushed {
				t.Error("stream not flushed to the client")
			}
			if got, want := f.spent("ann"), tc.spent; got != want {
				t.Errorf("spent %d, want %d", got, want)
			}
		})
	}
}

// TestSettleDebtAndRetryAfter: an actual cost far past the limit puts the
// caller in debt: the next request is denied with a Retry-After, and the
// headers report nothing left.
func TestSettleDebtAndRetryAfter(t *testing.T) {
	f := newSettleFixture(t, sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"})
	f.next = func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"usage":{"total_tokens":99999999999999999999999999}}`)
	}
	if rec := f.do(context.Background(), "ann", `{"max_tokens":10}`); rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	rec := f.do(context.Background(), "ann", `{"max_tokens":10}`)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" || rec.Header().Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("in debt: status %d Retry-After %q remaining %q, want 429 with a Retry-After and 0",
			rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("X-RateLimit-Remaining"))
	}
	s, _ := f.metrics.Snapshot().Rule("tokens")
	if s.Settled != 1 || s.Charged != 1990 {
		t.Fatalf("metrics: settled %d charged %d, want 1 and 1990 (the debt bound: twice the capacity less the estimate)", s.Settled, s.Charged)
	}
}

// TestSettleClientGone: a client that goes away mid-stream leaves the
// estimate standing.
func TestSettleClientGone(t *testing.T) {
	f := newSettleFixture(t, sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"})
	ctx, cancel := context.WithCancel(context.Background())
	f.next = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{}]}\n\n")
		cancel() // the client hangs up
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"total_tokens\":2}}\n\ndata: [DONE]\n\n")
	}
	f.do(ctx, "ann", `{"max_tokens":50}`)
	if got := f.spent("ann"); got != 50 {
		t.Fatalf("spent %d, want the estimate, 50", got)
	}
	s, _ := f.metrics.Snapshot().Rule("tokens")
	if s.Unsettled != 2 { // the hung-up request, and the probe, whose handler reports nothing
		t.Fatalf("unsettled %d, want 2", s.Unsettled)
	}
}

// TestSettleBodyTooLarge: a body over max_body is refused with 413,
// reaching no handler and spending nothing, whether its length is
// declared or not.
func TestSettleBodyTooLarge(t *testing.T) {
	f := newSettleFixture(t, sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens", MaxBody: 100})
	called := false
	f.next = func(w http.ResponseWriter, r *http.Request) { called = true }
	big := `{"max_tokens":1,"pad":"` + strings.Repeat("z", 200) + `"}`
	if rec := f.do(context.Background(), "ann", big); rec.Code != http.StatusRequestEntityTooLarge || called {
		t.Fatalf("declared length: status %d called %v, want 413 and no handler", rec.Code, called)
	}
	req := httptest.NewRequest("POST", "/v1/x", io.MultiReader(strings.NewReader(big)))
	req.ContentLength = -1
	req.Header.Set("X-User-ID", "ann")
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge || called {
		t.Fatalf("chunked: status %d called %v, want 413 and no handler", rec.Code, called)
	}
	if got := f.spent("ann"); got != 0 {
		t.Fatalf("spent %d, want 0", got)
	}
}

// BenchmarkSettle is a request under a tokens rule decided plainly, and
// under the same rule settled after the response: a fixed estimate and a
// header, and an estimate from a JSON body with the actual cost from the
// JSON response body and from an event stream.
func BenchmarkSettle(b *testing.B) {
	const reqBody = `{"model":"m","max_tokens":30,"messages":[{"role":"user","content":"hello"}]}`
	const respBody = `{"id":"c","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"total_tokens\":12}}\n\ndata: [DONE]\n\n"
	for _, bc := range []struct {
		name    string
		settle  *sluice.Settle
		handler http.HandlerFunc
	}{
		{"plain", nil, func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body); io.WriteString(w, respBody) }},
		{"settled/header", &sluice.Settle{ActualHeader: "X-Tokens"}, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("X-Tokens", "12")
			io.WriteString(w, respBody)
		}},
		{"settled/json", &sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"}, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, respBody)
		}},
		{"settled/stream", &sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"}, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, stream)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			eng, err := engine.New(memory.New(nil), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer eng.Close()
			rule := sluice.Rule{Name: "tokens", PathPrefix: "/v1", Scope: sluice.ScopeUser, Algorithm: "sliding_counter",
				Limit: 1_000_000_000, Window: time.Minute, Cost: 30, Settle: bc.settle}
			rs, err := sluice.NewRuleset([]sluice.Rule{rule}, nil, "")
			if err != nil {
				b.Fatal(err)
			}
			mw, err := New(Config{Engine: eng, Registry: sluice.NewRegistry(rs), Metrics: metrics.New(nil)})
			if err != nil {
				b.Fatal(err)
			}
			h := mw(bc.handler)
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(reqBody))
				r.Header.Set("X-User-ID", "bench")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != 200 {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}

// TestSettleAbortedResponse: a handler that aborts its response
// mid-stream (httputil.ReverseProxy panics with http.ErrAbortHandler when
// a body cannot be copied) is settled all the same, and the panic goes on
// up for net/http.
func TestSettleAbortedResponse(t *testing.T) {
	f := newSettleFixture(t, sluice.Settle{EstimateField: "max_tokens", ActualField: "usage.total_tokens"})
	f.next = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{}]}\n\n")
		panic(http.ErrAbortHandler)
	}
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Fatalf("recovered %v, want http.ErrAbortHandler", v)
			}
		}()
		f.do(context.Background(), "ann", `{"max_tokens":50}`)
	}()
	s, _ := f.metrics.Snapshot().Rule("tokens")
	if s.Unsettled != 1 {
		t.Fatalf("unsettled %d, want 1: the aborted stream's estimate stands", s.Unsettled)
	}
	if got := f.spent("ann"); got != 50 {
		t.Fatalf("spent %d, want the estimate, 50", got)
	}
}

// TestSettleStreamSplitAnyhow: however an event stream is cut into
// writes, the client gets it whole and the settle reads the last usage it
// holds.
func TestSettleStreamSplitAnyhow(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		usage := rapid.Int64Range(0, 1<<40).Draw(rt, "usage")
		crlf := rapid.Bool().Draw(rt, "crlf")
		nl := "\n"
		if crlf {
			nl = "\r\n"
		}
		stream := "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":null}" + nl + nl +
			": a comment" + nl +
			"data: {\"choices\":[],\"usage\":{\"total_tokens\":3}}" + nl + nl +
			fmt.Sprintf("data: {\"choices\":[],\"usage\":{\"total_tokens\":%d}}", usage) + nl + nl +
			"data: [DONE]" + nl + nl
		cuts := rapid.SliceOfN(rapid.IntRange(0, len(stream)), 0, 20).Draw(rt, "cuts")
		rec := httptest.NewRecorder()
		res := &sluice.Reserved{Rules: []*sluice.CompiledRule{settleRule(rt)}}
		sw := newSettleWriter(rec, res)
		sw.Header().Set("Content-Type", "text/event-stream")
		prev := 0
		slices.Sort(cuts)
		for _, c := range append(cuts, len(stream)) {
			sw.Write([]byte(stream[prev:c]))
			prev = c
		}
		if rec.Body.String() != stream {
			rt.Fatalf("the client got %q", rec.Body.String())
		}
		if n, ok := sw.actual(res.Rules[0]); !ok || n != usage {
			rt.Fatalf("actual = %d, %v; want %d", n, ok, usage)
		}
	})
}

// settleRule returns a compiled rule settled on usage.total_tokens.
func settleRule(t interface{ Fatal(...any) }) *sluice.CompiledRule {
	rs, err := sluice.NewRuleset([]sluice.Rule{{Name: "tokens", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: "fixed_window",
		Limit: 10, Window: time.Minute, Settle: &sluice.Settle{ActualField: "usage.total_tokens"}}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	return rs.Rules()[0]
}
