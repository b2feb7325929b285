package replay_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/replay"
)

// traceRequest is one request of a generated trace.
type traceRequest struct {
	at                                   int64 // Unix ns
	method, target, peer, xff, user, key string
}

var (
	traceMethods = []string{"GET", "POST", "DELETE"}
	tracePaths   = []string{"/", "/a", "/a/b/c", "/a%2Fb", "/b/x?q=1", "/c", "/b"}
	tracePeers   = []string{"192.0.2.1", "192.0.2.2", "10.0.0.5", "10.1.2.3", "2001:db8::1", "2001:db8::2", "2001:db8:0:1::9"}
	traceXFF     = []string{"", "", "198.51.100.7", "192.0.2.66, 198.51.100.8", "2001:db8:5::1", "garbage", "198.51.100.7, 10.0.0.9"}
	traceUsers   = []string{"", "", "alice", "bob", strings.Repeat("x", identity.MaxUserIDLen+1)}
	traceKeys    = []string{"", "", "k-1", "k-2"}
	prefixes     = []string{"/", "/a", "/a/b", "/b", "/c"}
	algorithms   = []string{"token_bucket", "leaky_bucket", "fixed_window", "sliding_log", "sliding_counter", "gcra"}
	scopes       = []string{"ip", "user", "api_key", "global"}
	windows      = []string{"1s", "2s", "10s"}
)

// genConfig draws a rules file: a match mode, an identity section and a
// few rules of every algorithm and scope, perhaps a default.
func genConfig(t *rapid.T) string {
	var b strings.Builder
	mode := rapid.SampledFrom([]string{"most_specific", "all"}).Draw(t, "mode")
	fmt.Fprintf(&b, "match: %s\nidentity:\n  trusted_proxies: [\"10.0.0.0/8\"]\n  ipv6_prefix: %d\n  headers_from_trusted_proxies_only: %v\n",
		mode, rapid.SampledFrom([]int{48, 64, 128}).Draw(t, "v6"), rapid.Bool().Draw(t, "trustedOnly"))
	type where struct{ method, prefix string }
	places := rapid.SliceOfNDistinct(rapid.Custom(func(t *rapid.T) where {
		return where{rapid.SampledFrom([]string{"", "GET", "POST"}).Draw(t, "method"), rapid.SampledFrom(prefixes).Draw(t, "prefix")}
	}), 1, 4, func(w where) where { return w }).Draw(t, "places")
	rule := func(indent string, i int, w *where) {
		alg := rapid.SampledFrom(algorithms).Draw(t, "algorithm")
		limit := rapid.IntRange(1, 5).Draw(t, "limit")
		if w != nil {
			fmt.Fprintf(&b, "%sname: r%d\n", indent[:len(indent)-2]+"- ", i) // a list item
		} else {
			fmt.Fprintf(&b, "%sname: r%d\n", indent, i)
		}
		if w != nil {
			if w.method != "" {
				fmt.Fprintf(&b, "%smethod: %s\n", indent, w.method)
			}
			fmt.Fprintf(&b, "%spath_prefix: %s\n", indent, w.prefix)
		}
		fmt.Fprintf(&b, "%sscope: %s\n%salgorithm: %s\n%slimit: %d\n%swindow: %s\n", indent, rapid.SampledFrom(scopes).Draw(t, "scope"),
			indent, alg, indent, limit, indent, rapid.SampledFrom(windows).Draw(t, "window"))
		capacity := limit
		if (alg == "token_bucket" || alg == "leaky_bucket" || alg == "gcra") && rapid.Bool().Draw(t, "burst?") {
			capacity = rapid.IntRange(1, 8).Draw(t, "burst")
			fmt.Fprintf(&b, "%sburst: %d\n", indent, capacity)
		}
		if capacity >= 2 && rapid.IntRange(0, 4).Draw(t, "cost?") == 0 {
			fmt.Fprintf(&b, "%scost: %d\n", indent, rapid.IntRange(2, capacity).Draw(t, "cost")) // a larger one is refused
		}
	}
	b.WriteString("rules:\n")
	for i := range places {
		rule("    ", i, &places[i])
	}
	if rapid.Bool().Draw(t, "default?") {
		b.WriteString("default:\n")
		rule("  ", 99, nil)
	}
	return b.String()
}

// genTrace draws requests in time order, several often in one
// millisecond.
func genTrace(t *rapid.T, start int64) []traceRequest {
	n := rapid.IntRange(1, 60).Draw(t, "n")
	at := start
	out := make([]traceRequest, n)
	for i := range out {
		at += int64(rapid.SampledFrom([]int{0, 0, 1, 50, 300, 999, 2500}).Draw(t, "gap ms")) * 1e6
		out[i] = traceRequest{
			at:     at,
			method: rapid.SampledFrom(traceMethods).Draw(t, "method"),
			target: rapid.SampledFrom(tracePaths).Draw(t, "target"),
			peer:   rapid.SampledFrom(tracePeers).Draw(t, "peer"),
			xff:    rapid.SampledFrom(traceXFF).Draw(t, "xff"),
			user:   rapid.SampledFrom(traceUsers).Draw(t, "user"),
			key:    rapid.SampledFrom(traceKeys).Draw(t, "key"),
		}
	}
	return out
}

// combinedLog writes the trace as nginx would log it with
// log_format '... "$http_x_forwarded_for" "$upstream_http_x_user_id"
// "$http_x_api_key" $msec'.
func combinedLog(trace []traceRequest) []byte {
	var b bytes.Buffer
	or := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, r := range trace {
		ts := time.Unix(0, r.at).UTC().Format("02/Jan/2006:15:04:05 -0700")
		msec := strconv.FormatInt(r.at/1e9, 10) + "." + fmt.Sprintf("%03d", r.at%1e9/1e6)
		fmt.Fprintf(&b, "%s - - [%s] \"%s %s HTTP/1.1\" 200 5 \"-\" \"test\" \"%s\" \"%s\" \"%s\" %s\n",
			r.peer, ts, r.method, r.target, or(r.xff), or(r.user), or(r.key), msec)
	}
	return b.Bytes()
}

// jsonLog writes the trace as JSON lines, leaving out the keys of
// absent fields.
func jsonLog(trace []traceRequest) []byte {
	var b bytes.Buffer
	for _, r := range trace {
		fmt.Fprintf(&b, `{"time":%d.%03d,"remote_addr":%q,"method":%q,"uri":%q`, r.at/1e9, r.at%1e9/1e6, r.peer, r.method, r.target)
		for _, kv := range [][2]string{{"http_x_forwarded_for", r.xff}, {"user", r.user}, {"api_key", r.key}} {
			if kv[1] != "" {
				fmt.Fprintf(&b, `,%q:%q`, kv[0], kv[1])
			}
		}
		b.WriteString("}\n")
	}
	return b.Bytes()
}

// wantStatus is the HTTP status serve answers a request of an outcome
// with.
var wantStatus = map[replay.Status]int{
	replay.Unlimited:   http.StatusOK,
	replay.Allowed:     http.StatusOK,
	replay.Denied:      http.StatusTooManyRequests,
	replay.BadIdentity: http.StatusBadRequest,
	replay.Failed:      http.StatusInternalServerError,
}

// Replaying a log (combined or JSON) gives, request for request, the answers serve's
// middleware (httplimit, over the same rules file, on an engine whose
// clock is set to each request's time) gives the same requests: the same
// status, the same rule reported and the same remaining budget.
func TestReplayDecidesAsServe(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		yaml := genConfig(t)
		cfg, err := config.Parse("rules.yaml", []byte(yaml))
		if err != nil {
			t.Fatalf("generated rules do not parse: %v\n%s", err, yaml)
		}
		start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixNano()
		trace := genTrace(t, start)

		// The replay.
		r, err := replay.New("rules.yaml", cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		log := combinedLog(trace)
		if rapid.Bool().Draw(t, "json") {
			log = jsonLog(trace)
		}
		src, err := replay.NewSource("trace.log", bytes.NewReader(log), replay.SourceOptions{
			Extra: []replay.Field{replay.FieldXFF, replay.FieldUser, replay.FieldAPIKey, replay.FieldMsec},
		}, 5)
		if err != nil {
			t.Fatal(err)
		}
		var got []replay.Outcome
		res := replay.Run([]*replay.Source{src}, r, nil, replay.RunOptions{
			OnDecision: func(_ *replay.Record, a, _ replay.Outcome) { got = append(got, a) },
		})
		if len(res.BadLines) > 0 {
			t.Fatalf("bad line: %+v", res.BadLines[0])
		}
		if len(got) != len(trace) {
			t.Fatalf("replay decided %d requests of %d", len(got), len(trace))
		}

		// serve's middleware.
		rs, err := cfg.Ruleset()
		if err != nil {
			t.Fatal(err)
		}
		id, err := identity.New(cfg.Identity)
		if err != nil {
			t.Fatal(err)
		}
		clock := engine.NewFakeClock(time.Unix(0, start))
		eng, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		mw, err := httplimit.New(httplimit.Config{Engine: eng, Registry: sluice.NewRegistry(rs), Identifier: id,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
		// A leaky bucket's admitted request waits its delay before the
		// handler; a context already done ends that wait at once (the
		// headers are set before it).
		done, cancel := context.WithCancel(context.Background())
		cancel()
		for i, tr := range trace {
			clock.SetUnixNano(tr.at)
			req := httptest.NewRequest(tr.method, tr.target, nil).WithContext(done)
			port := "40000"
			if strings.Contains(tr.peer, ":") {
				req.RemoteAddr = "[" + tr.peer + "]:" + port
			} else {
				req.RemoteAddr = tr.peer + ":" + port
			}
			for name, v := range map[string]string{"X-Forwarded-For": tr.xff, "X-User-Id": tr.user, "X-Api-Key": tr.key} {
				if v != "" {
					req.Header.Set(name, v)
				}
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			o := got[i]
			if w.Code != wantStatus[o.Status] {
				t.Fatalf("request %d (%+v): serve answered %d, replay %v\nrules:\n%s", i, tr, w.Code, o.Status, yaml)
			}
			if o.Status != replay.Allowed && o.Status != replay.Denied {
				continue
			}
			if got, want := w.Header().Get("Ratelimit-Policy"), `"`+o.Rule.Name()+`"`; !strings.HasPrefix(got, want) {
				t.Fatalf("request %d (%+v): serve reported rule %s, replay %s\nrules:\n%s", i, tr, got, want, yaml)
			}
			if got, want := w.Header().Get("X-Ratelimit-Remaining"), strconv.FormatInt(o.Decision.Remaining, 10); got != want {
				t.Fatalf("request %d (%+v): serve says %s remaining, replay %s\nrules:\n%s", i, tr, got, want, yaml)
			}
		}
	})
}
