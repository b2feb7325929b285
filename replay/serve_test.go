package replay_test

import (
	"bytes"
	"context"
	"fmt"
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
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/replay"
)

// traceRequest is one request of a generated trace.
type traceRequest struct {
	at                                         int64 // Unix ns
	method, target, peer, xff, user, key, plan string
}

var (
	traceMethods = []string{"GET", "POST", "DELETE", "HEAD"}
	tracePaths   = []string{"/", "/a", "/a/b/c", "/a%2Fb", "/b/x?q=1", "/c", "/b", "//a/b", "/a/./b/c", "/x/../a", "/c/%2e%2e/b"}
	tracePeers   = []string{"192.0.2.1", "192.0.2.2", "10.0.0.5", "10.1.2.3", "2001:db8::1", "2001:db8::2", "2001:db8:0:1::9"}
	traceXFF     = []string{"", "", "198.51.100.7", "192.0.2.66, 198.51.100.8", "2001:db8:5::1", "garbage", "198.51.100.7, 10.0.0.9"}
	traceUsers   = []string{"", "", "alice", "bob", strings.Repeat("x", identity.MaxUserIDLen+1)}
	traceKeys    = []string{"", "", "k-1", "k-2"}
	tracePlans   = []string{"", "", "premium", "gold", "bad plan!"}
	callers      = map[string][]string{"user": {"user:alice", "user:bob"}, "api_key": {"key:k-1"}, "ip": {"ip:192.0.2.1", "ip:198.51.100.7", "ip:2001:db8::1"}}
	prefixes     = []string{"/", "/a", "/a/b", "/b", "/c"}
	algorithms   = []string{"token_bucket", "leaky_bucket", "fixed_window", "sliding_log", "sliding_counter", "gcra"}
	scopes       = []string{"ip", "user", "api_key", "global"}
	windows      = []string{"1s", "2s", "10s"}
)

// genConfig draws a rules file: a match mode, an identity section and a
// few rules of every algorithm and scope, perhaps a default, perhaps
// shadow rules, rules for a plan (one in place of a plan-less rule) and
// overrides for some callers.
func genConfig(t *rapid.T) string {
	var b strings.Builder
	mode := rapid.SampledFrom([]string{"most_specific", "all"}).Draw(t, "mode")
	fmt.Fprintf(&b, "match: %s\nidentity:\n  trusted_proxies: [\"10.0.0.0/8\"]\n  ipv6_prefix: %d\n  headers_from_trusted_proxies_only: %v\n  plan_header: X-Plan\n",
		mode, rapid.SampledFrom([]int{48, 64, 128}).Draw(t, "v6"), rapid.Bool().Draw(t, "trustedOnly"))
	type where struct{ method, prefix string }
	places := rapid.SliceOfNDistinct(rapid.Custom(func(t *rapid.T) where {
		return where{rapid.SampledFrom([]string{"", "GET", "POST"}).Draw(t, "method"), rapid.SampledFrom(prefixes).Draw(t, "prefix")}
	}), 1, 4, func(w where) where { return w }).Draw(t, "places")
	twin := false // the rule is a premium twin
	scopeOf := map[string]string{}
	special := map[int]bool{} // the rules with a plan or shadow
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
		scope := rapid.SampledFrom(scopes).Draw(t, "scope")
		scopeOf[fmt.Sprintf("r%d", i)] = scope
		fmt.Fprintf(&b, "%sscope: %s\n%salgorithm: %s\n%slimit: %d\n%swindow: %s\n", indent, scope,
			indent, alg, indent, limit, indent, rapid.SampledFrom(windows).Draw(t, "window"))
		switch kind := rapid.IntRange(0, 5).Draw(t, "kind"); {
		case twin:
			fmt.Fprintf(&b, "%splan: premium\n", indent)
		case kind == 0:
			fmt.Fprintf(&b, "%sshadow: true\n", indent)
			special[i] = true
		case kind == 1:
			if w != nil {
				fmt.Fprintf(&b, "%splan: premium\n", indent)
				special[i] = true
			}
		}
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
	if !special[0] && rapid.Bool().Draw(t, "plan twin?") {
		// A premium rule at the place of the first: it replaces it for
		// premium callers, most specific or all.
		twin = true
		rule("    ", 50, &places[0])
		twin = false
	}
	if rapid.Bool().Draw(t, "default?") {
		b.WriteString("default:\n")
		rule("  ", 99, nil)
	}
	var names []string // the rules an override may name, and its callers
	for name, scope := range scopeOf {
		if scope != "global" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if n := rapid.IntRange(0, 3).Draw(t, "overrides"); n > 0 && len(names) > 0 {
		b.WriteString("overrides:\n")
		type ov struct{ rule, caller string }
		for _, o := range rapid.SliceOfNDistinct(rapid.Custom(func(t *rapid.T) ov {
			name := rapid.SampledFrom(names).Draw(t, "rule")
			return ov{name, rapid.SampledFrom(callers[scopeOf[name]]).Draw(t, "caller")}
		}), n, n, func(o ov) ov { return o }).Draw(t, "override") {
			// At least every generated cost and burst: a valid limit.
			fmt.Fprintf(&b, "  - rule: %s\n    caller: %s\n    limit: %d\n", o.rule, o.caller, rapid.IntRange(8, 12).Draw(t, "override limit"))
		}
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
			plan:   rapid.SampledFrom(tracePlans).Draw(t, "plan"),
		}
	}
	return out
}

// combinedLog writes the trace as nginx would log it with
// log_format '... "$http_x_forwarded_for" "$upstream_http_x_user_id"
// "$http_x_api_key" "$http_x_plan" $msec'.
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
		fmt.Fprintf(&b, "%s - - [%s] \"%s %s HTTP/1.1\" 200 5 \"-\" \"test\" \"%s\" \"%s\" \"%s\" \"%s\" %s\n",
			r.peer, ts, r.method, r.target, or(r.xff), or(r.user), or(r.key), or(r.plan), msec)
	}
	return b.Bytes()
}

// jsonLog writes the trace as JSON lines, leaving out the keys of
// absent fields.
func jsonLog(trace []traceRequest) []byte {
	var b bytes.Buffer
	for _, r := range trace {
		fmt.Fprintf(&b, `{"time":%d.%03d,"remote_addr":%q,"method":%q,"uri":%q`, r.at/1e9, r.at%1e9/1e6, r.peer, r.method, r.target)
		for _, kv := range [][2]string{{"http_x_forwarded_for", r.xff}, {"user", r.user}, {"api_key", r.key}, {"plan", r.plan}} {
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
			Extra: []replay.Field{replay.FieldXFF, replay.FieldUser, replay.FieldAPIKey, replay.FieldPlan, replay.FieldMsec},
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
		mx := metrics.New(nil)
		mw, err := httplimit.New(httplimit.Config{Engine: eng, Registry: sluice.NewRegistry(rs), Identifier: id,
			Metrics: mx, ShadowHeaders: true, Logger: slog.New(slog.DiscardHandler)})
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
			for name, v := range map[string]string{"X-Forwarded-For": tr.xff, "X-User-Id": tr.user, "X-Api-Key": tr.key, "X-Plan": tr.plan} {
				if v != "" {
					req.Header.Set(name, v)
				}
			}
			before := shadowDenials(mx, rs)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			o := got[i]
			if w.Code != wantStatus[o.Status] {
				t.Fatalf("request %d (%+v): serve answered %d, replay %v\nrules:\n%s", i, tr, w.Code, o.Status, yaml)
			}
			if denied := shadowDenials(mx, rs) > before; denied != o.ShadowDenied {
				t.Fatalf("request %d (%+v): serve counted a would-be denial: %v, replay %v\nrules:\n%s", i, tr, denied, o.ShadowDenied, yaml)
			}
			if o.Status == replay.Unlimited {
				want := ""
				if o.ShadowRule != nil {
					want = `"` + o.ShadowRule.Name() + `"`
				}
				if got := w.Header().Get("Ratelimit-Policy"); !strings.HasPrefix(got, want) || (want == "") != (got == "") {
					t.Fatalf("request %d (%+v): serve reported shadow rule %q, replay %q\nrules:\n%s", i, tr, got, want, yaml)
				}
				if got, want := w.Header().Get("X-Ratelimit-Remaining"), strconv.FormatInt(o.Decision.Remaining, 10); want != "" && o.ShadowRule != nil && got == "" {
					t.Fatalf("request %d: no shadow headers", i)
				}
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
		// Each shadow rule's would-be denials, as serve counted them.
		rep := r.Report(0.99, 3)
		for _, rr := range rep.Rules {
			if !rr.Shadow {
				continue
			}
			if m, _ := mx.Snapshot().Rule(rr.Name); m.ShadowDenied != uint64(rr.Denied) {
				t.Fatalf("shadow rule %s: serve counted %d would-be denials, replay %d\nrules:\n%s", rr.Name, m.ShadowDenied, rr.Denied, yaml)
			}
		}
	})
}

// shadowDenials sums the would-be denials mx counted under rs's shadow
// rules.
func shadowDenials(mx *metrics.Metrics, rs *sluice.Ruleset) uint64 {
	all := rs.Rules()
	if d := rs.Default(); d != nil {
		all = append(all, d)
	}
	var n uint64
	snap := mx.Snapshot()
	for _, c := range all {
		if c.Shadow() {
			m, _ := snap.Rule(c.Name())
			n += m.ShadowDenied
		}
	}
	return n
}
