package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/dunglas/httpsfv"
)

// rateFields are a response's rate-limit fields: the IETF draft's, read
// with an independent RFC 9651 parser, and the X-RateLimit- ones.
type rateFields struct {
	name                     string
	q, w, r, t               int64
	limit, remaining, xreset int64
	retryAfter               int64 // -1 when absent
}

// parseRateFields reads h's rate-limit fields, failing t on a field that
// does not parse: RateLimit-Policy and RateLimit as Lists of one Item (a
// String naming the policy, with non-negative Integer parameters), the
// X-RateLimit- fields and Retry-After as non-negative integers.
func parseRateFields(t *testing.T, call string, h http.Header) rateFields {
	t.Helper()
	var f rateFields
	item := func(field string) httpsfv.Item {
		t.Helper()
		l, err := httpsfv.UnmarshalList(h.Values(field))
		if err != nil || len(l) != 1 {
			t.Fatalf("%s: %s %q: %v (%d members), want a List of one Item", call, field, h.Values(field), err, len(l))
		}
		it, ok := l[0].(httpsfv.Item)
		if !ok {
			t.Fatalf("%s: %s %q: an Inner List, want an Item", call, field, h.Values(field))
		}
		return it
	}
	param := func(it httpsfv.Item, field, key string) int64 {
		t.Helper()
		v, ok := it.Params.Get(key)
		n, isInt := v.(int64)
		if !ok || !isInt || n < 0 {
			t.Fatalf("%s: %s: parameter %s = %v, want a non-negative Integer", call, field, key, v)
		}
		return n
	}
	integer := func(field string) int64 {
		t.Helper()
		vs := h.Values(field)
		if len(vs) == 0 {
			return -1
		}
		n, err := strconv.ParseInt(vs[0], 10, 64)
		if len(vs) != 1 || err != nil || n < 0 {
			t.Fatalf("%s: %s %q, want one non-negative integer", call, field, vs)
		}
		return n
	}
	pi, ri := item("RateLimit-Policy"), item("RateLimit")
	name, ok1 := pi.Value.(string)
	rname, ok2 := ri.Value.(string)
	if !ok1 || !ok2 || name != rname {
		t.Fatalf("%s: RateLimit-Policy %v and RateLimit %v: want the same String naming the policy", call, pi.Value, ri.Value)
	}
	f.name = name
	f.q, f.w = param(pi, "RateLimit-Policy", "q"), param(pi, "RateLimit-Policy", "w")
	f.r, f.t = param(ri, "RateLimit", "r"), param(ri, "RateLimit", "t")
	f.limit, f.remaining, f.xreset = integer("X-RateLimit-Limit"), integer("X-RateLimit-Remaining"), integer("X-RateLimit-Reset")
	f.retryAfter = integer("Retry-After")
	if f.limit < 0 || f.remaining < 0 || f.xreset < 0 {
		t.Fatalf("%s: an X-RateLimit- field is missing: %v", call, h)
	}
	return f
}

// A real `sluice serve` process's answers, allowed and 429, under a rule of
// every algorithm (the leaky bucket's with a burst, its admitted requests
// held by the process for their delay), carry rate-limit fields that parse
// with an independent RFC 9651 parser and agree as docs/serve.md's table
// says: q is X-RateLimit-Limit, the capacity; r is X-RateLimit-Remaining,
// never above q; an allowed answer's t is never past w nor X-RateLimit-Reset;
// a 429's t is its Retry-After, at least 1 and never past X-RateLimit-Reset.
func TestServeProcessRateLimitFields(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	up := upstream(t)
	type rule struct {
		algorithm    string
		limit, burst int64
		window       string
		capacity     int64
		concurrent   int // requests sent at once (the leaky bucket holds each for its delay)
	}
	rules := []rule{
		{"token_bucket", 2, 5, "2s", 5, 1},
		{"gcra", 2, 0, "2s", 2, 1},
		{"fixed_window", 2, 0, "2s", 2, 1},
		{"sliding_log", 2, 0, "2s", 2, 1},
		{"sliding_counter", 2, 0, "2s", 2, 1},
		// 10 a second with a queue of 5: the fifth admitted waits 400ms.
		{"leaky_bucket", 10, 5, "1s", 5, 8},
	}
	var cfg strings.Builder
	cfg.WriteString("store:\n" + memoryStore + "\non_store_error: closed\nrules:\n")
	for _, r := range rules {
		burst := ""
		if r.burst > 0 {
			burst = fmt.Sprintf(", burst: %d", r.burst)
		}
		fmt.Fprintf(&cfg, "  - {name: %s, path_prefix: /%s, scope: ip, algorithm: %s, limit: %d, window: %s%s}\n",
			r.algorithm, r.algorithm, r.algorithm, r.limit, r.window, burst)
	}
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	writeFile(t, cfgPath, cfg.String())
	p := startServeProcess(t, bin, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL)

	type answer struct {
		code   int
		header http.Header
		body   string
	}
	get := func(path string) answer {
		resp, err := testClient.Get("http://" + p.listen + path)
		if err != nil {
			t.Error(err)
			return answer{}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header, string(b)}
	}
	for _, r := range rules {
		// At least one more than the capacity, and on until one is denied:
		// on a loaded machine the requests can straddle a fixed window's
		// boundary, or let a bucket refill, so that the first capacity+1
		// are all allowed.
		var answers []answer
		for seen429 := false; len(answers) < int(r.capacity)+1 || !seen429 && len(answers) < 20*(int(r.capacity)+1); {
			batch := make([]answer, r.concurrent)
			var wg sync.WaitGroup
			for i := range batch {
				wg.Go(func() { batch[i] = get("/" + r.algorithm) })
			}
			wg.Wait()
			for _, a := range batch {
				seen429 = seen429 || a.code == http.StatusTooManyRequests
			}
			answers = append(answers, batch...)
		}
		denied := 0
		for i, a := range answers {
			call := fmt.Sprintf("%s request %d (%d %q): %v", r.algorithm, i+1, a.code, a.body, a.header)
			if a.code != http.StatusOK && a.code != http.StatusTooManyRequests {
				t.Errorf("%s: want 200 or 429", call)
				continue
			}
			f := parseRateFields(t, call, a.header)
			switch {
			case f.name != r.algorithm:
				t.Errorf("%s: the policy is named %q", call, f.name)
			case f.q != r.capacity || f.limit != r.capacity:
				t.Errorf("%s: q %d, X-RateLimit-Limit %d; want the capacity %d", call, f.q, f.limit, r.capacity)
			case f.r > f.q || f.r != f.remaining:
				t.Errorf("%s: r %d against q %d and X-RateLimit-Remaining %d", call, f.r, f.q, f.remaining)
			case r.algorithm != "sliding_counter" && f.xreset > f.w:
				t.Errorf("%s: X-RateLimit-Reset %d past the window w %d", call, f.xreset, f.w)
			case a.code == http.StatusOK && (f.t > f.w || f.t > f.xreset):
				t.Errorf("%s: t %d past the window w %d or X-RateLimit-Reset %d", call, f.t, f.w, f.xreset)
			case a.code == http.StatusOK && f.retryAfter >= 0:
				t.Errorf("%s: Retry-After on an allowed answer", call)
			case a.code == http.StatusTooManyRequests && (f.retryAfter < 1 || f.retryAfter != f.t || f.retryAfter > f.xreset):
				t.Errorf("%s: Retry-After %d, t %d, X-RateLimit-Reset %d: want Retry-After = t, at least 1, never past the reset", call, f.retryAfter, f.t, f.xreset)
			case a.code == http.StatusTooManyRequests && !strings.Contains(a.body, r.algorithm):
				t.Errorf("%s: the body does not name the rule", call)
			}
			if a.code == http.StatusTooManyRequests {
				denied++
			}
		}
		if denied == 0 {
			t.Errorf("%s: none of %d requests was denied: no 429 was checked", r.algorithm, len(answers))
		}
	}
}
