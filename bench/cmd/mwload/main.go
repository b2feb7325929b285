// Command mwload drives Sluice's per-handler middleware
// (httplimit.PerHandler) and the middleware a Go developer would
// otherwise reach for — go-chi/httprate and sethvargo/go-limiter's
// httplimit — each serving real HTTP on loopback, with 64 callers in
// flight at once, while CPU-heavy processes compete for the cores.
//
// Each variant limits per caller, keyed by the X-Caller header, which
// every middleware is given a key function for. Two checks run per round,
// interleaved across the variants so that the machine's noise falls on all
// of them:
//
//   - exactness: K callers, each allowed L requests per hour, send
//     3·L requests each, all at once; a caller must get exactly L
//     answers 200 and 429s with Retry-After for the rest;
//   - throughput: the same callers under a limit no caller reaches, so
//     every request is decided and allowed: requests a second and the
//     latency percentiles, against the bare handler on the same server
//     setup ("floor").
//
// Usage, from bench/:
//
//	go run ./cmd/mwload [-out out/mwload.md] [-workers 64] [-rounds 5] [-requests 40000] [-burners 2]
//
// It writes a markdown fragment with the medians of the rounds and exits 1
// when a Sluice variant miscounted or a request failed (a peer that
// miscounts is reported, not fatal: it is what it is).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-chi/httprate"
	glhttp "github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/internal/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// The variants, in the order of the tables.
var variants = []string{"floor", "sluice PerHandler", "httprate", "go-limiter"}

// callerHeader carries the caller's key; every variant keys by it.
const callerHeader = "X-Caller"

// keyOf is every variant's key function.
func keyOf(r *http.Request) (string, error) {
	k := r.Header.Get(callerHeader)
	if k == "" {
		return "", errors.New("no caller")
	}
	return k, nil
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "ok\n")
})

// newHandler returns variant v limiting each caller to limit per window,
// and a function that releases it.
func newHandler(v string, limit int64, window time.Duration) (http.Handler, func(), error) {
	switch v {
	case "floor":
		return ok, func() {}, nil
	case "sluice PerHandler":
		lim, err := sluice.NewLimiter(limit, window)
		if err != nil {
			return nil, nil, err
		}
		mw, err := httplimit.PerHandler(httplimit.PerHandlerConfig{Limiter: lim, Key: keyOf})
		if err != nil {
			return nil, nil, err
		}
		return mw(ok), func() { _ = lim.Close() }, nil
	case "httprate":
		return httprate.Limit(int(limit), window, httprate.WithKeyFuncs(func(r *http.Request) (string, error) {
			return keyOf(r)
		}))(ok), func() {}, nil
	case "go-limiter":
		s, err := memorystore.New(&memorystore.Config{Tokens: uint64(limit), Interval: window})
		if err != nil {
			return nil, nil, err
		}
		m, err := glhttp.NewMiddleware(s, keyOf)
		if err != nil {
			return nil, nil, err
		}
		return m.Handle(ok), func() { _ = s.Close(context.Background()) }, nil
	}
	return nil, nil, fmt.Errorf("unknown variant %q", v)
}

type options struct {
	out                      string
	workers, rounds, burners int
	requests, callers, limit int
}

// figures are one variant's measurements in one round.
type figures struct {
	rps      float64
	p50, p99 time.Duration
	wrong    int // callers not given exactly limit 200s
	noRetry  int // 429s without Retry-After
	errors   int // requests without an HTTP answer
	statuses map[int]int
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := options{}
	fs := flag.NewFlagSet("mwload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.out, "out", "out/mwload.md", "the markdown `file` to write")
	fs.IntVar(&o.workers, "workers", 64, "requests in flight at once")
	fs.IntVar(&o.rounds, "rounds", 5, "interleaved rounds")
	fs.IntVar(&o.burners, "burners", 2, "CPU-burning processes run beside the load")
	fs.IntVar(&o.requests, "requests", 40000, "allowed requests per variant per round (throughput)")
	fs.IntVar(&o.callers, "callers", 256, "distinct callers")
	fs.IntVar(&o.limit, "limit", 20, "requests per caller per hour in the exactness check")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.workers < 1 || o.rounds < 1 || o.requests < 1 || o.callers < 1 || o.limit < 1 || o.burners < 0 {
		fmt.Fprintln(stderr, "mwload: -workers, -rounds, -requests, -callers and -limit must be positive, -burners not negative")
		return 2
	}
	for i := 0; i < o.burners; i++ {
		burn := exec.CommandContext(ctx, "sh", "-c", "while :; do :; done")
		if err := burn.Start(); err != nil {
			fmt.Fprintln(stderr, "mwload: starting a CPU burner:", err)
			return 1
		}
		defer func() { _ = burn.Process.Kill(); _ = burn.Wait() }()
	}
	got := make(map[string][]figures)
	failed := false
	for round := 0; round < o.rounds; round++ {
		fmt.Fprintf(stderr, "round %d of %d…\n", round+1, o.rounds)
		order := slices.Clone(variants)
		k := round % len(order)
		order = append(order[k:], order[:k]...)
		for _, v := range order {
			f, err := measure(ctx, v, o)
			if err != nil {
				fmt.Fprintf(stderr, "mwload: %s: %v\n", v, err)
				return 1
			}
			got[v] = append(got[v], f)
			if strings.HasPrefix(v, "sluice") && (f.wrong > 0 || f.noRetry > 0 || f.errors > 0) {
				failed = true
			}
		}
	}
	report := render(o, got)
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(report), 0o644); err != nil {
			fmt.Fprintln(stderr, "mwload:", err)
			return 1
		}
	}
	fmt.Fprint(stdout, report)
	if failed {
		fmt.Fprintln(stderr, "mwload: a Sluice variant miscounted or failed a request")
		return 1
	}
	return 0
}

// measure runs one round of both checks on variant v, each on a fresh
// server over loopback.
func measure(ctx context.Context, v string, o options) (figures, error) {
	var f figures
	// Exactness: 3·limit requests per caller at a limit per hour.
	h, release, err := newHandler(v, int64(o.limit), time.Hour)
	if err != nil {
		return f, err
	}
	srv := httptest.NewServer(h)
	headers := callerHeaders(o.callers, "exact")
	res, err := loadgen.Run(ctx, loadgen.Config{
		BaseURL:  srv.URL,
		Workers:  o.workers,
		Requests: 3 * o.limit * o.callers,
		Factory: func(_, seq int) loadgen.Request {
			c := seq % o.callers
			return loadgen.Request{Path: "/", Header: headers[c], Caller: headers[c].Get(callerHeader)}
		},
	})
	srv.Close()
	release()
	if err != nil {
		return f, err
	}
	if v != "floor" {
		for _, cs := range res.ByCaller {
			if cs.ByStatus[http.StatusOK] != o.limit {
				f.wrong++
			}
		}
		f.noRetry = res.NoRetryAfter
	}
	f.errors = res.Errors
	// Throughput: every request allowed and decided.
	h, release, err = newHandler(v, 1_000_000_000, time.Hour)
	if err != nil {
		return f, err
	}
	srv = httptest.NewServer(h)
	defer srv.Close()
	defer release()
	headers = callerHeaders(o.callers, "open")
	res, err = loadgen.Run(ctx, loadgen.Config{
		BaseURL:  srv.URL,
		Workers:  o.workers,
		Requests: o.requests,
		Factory: func(_, seq int) loadgen.Request {
			c := seq % o.callers
			return loadgen.Request{Path: "/", Header: headers[c]}
		},
	})
	if err != nil {
		return f, err
	}
	f.rps, f.p50, f.p99 = res.RPS(), res.Percentile(50), res.Percentile(99)
	f.errors += res.Errors
	f.statuses = res.ByStatus
	if res.Class(2) != res.Requests {
		return f, fmt.Errorf("the open limit answered %v", res.ByStatus)
	}
	return f, nil
}

func callerHeaders(n int, prefix string) []http.Header {
	hs := make([]http.Header, n)
	for i := range hs {
		hs[i] = http.Header{callerHeader: {prefix + "-" + strconv.Itoa(i)}}
	}
	return hs
}

func median(fs []figures, f func(figures) float64) float64 {
	v := make([]float64, len(fs))
	for i, x := range fs {
		v[i] = f(x)
	}
	slices.Sort(v)
	if n := len(v); n%2 == 1 {
		return v[n/2]
	} else {
		return (v[n/2-1] + v[n/2]) / 2
	}
}

func render(o options, got map[string][]figures) string {
	var b strings.Builder
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&b, "<!-- mwload: %s, %s, %d CPUs, %d workers, %d burners, %d rounds; loadavg at the end %s -->\n\n",
		time.Now().UTC().Format("2006-01-02"), runtime.Version(), runtime.NumCPU(), o.workers, o.burners, o.rounds, strings.TrimSpace(string(load)))
	fmt.Fprintf(&b, "%d callers in flight on loopback, %d CPU-burning processes beside; medians of %d interleaved rounds.\n\n", o.workers, o.burners, o.rounds)
	b.WriteString("| middleware | req/s | p50 µs | p99 µs | req/s ÷ floor | callers not given exactly their limit | 429s without Retry-After | transport errors |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	floor := median(got["floor"], func(f figures) float64 { return f.rps })
	for _, v := range variants {
		fs := got[v]
		rps := median(fs, func(f figures) float64 { return f.rps })
		wrong, noRetry, errs := 0, 0, 0
		for _, f := range fs {
			wrong += f.wrong
			noRetry += f.noRetry
			errs += f.errors
		}
		exact := fmt.Sprintf("%d of %d", wrong, o.callers*len(fs))
		if v == "floor" {
			exact, noRetry = "—", 0
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %.2f | %s | %d | %d |\n", v, rps,
			median(fs, func(f figures) float64 { return float64(f.p50.Microseconds()) }),
			median(fs, func(f figures) float64 { return float64(f.p99.Microseconds()) }),
			rps/floor, exact, noRetry, errs)
	}
	return b.String()
}
