package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Errors Run returns for a Config it cannot run.
var (
	// ErrNoBound is returned when a Config has neither Requests nor
	// Duration: an unbounded run is refused.
	ErrNoBound = errors.New("sluice/internal/loadgen: set Requests, Duration or both; an unbounded run is refused")
	// ErrBadConfig is wrapped by every other validation error.
	ErrBadConfig = errors.New("sluice/internal/loadgen: invalid configuration")
)

// Request is one request a Factory asks for.
type Request struct {
	// Method is the HTTP method; empty means GET.
	Method string
	// Path is the path and query, appended to Config.BaseURL; it should
	// start with "/".
	Path string
	// Header holds the request's headers, or nil. Run does not modify it,
	// so a Factory may hand out the same Header to many requests.
	Header http.Header
	// Caller names who sends the request, for Result.ByCaller; empty
	// requests are counted under "".
	Caller string
}

// Factory returns the request a worker sends next. worker is the worker's
// index (0 to Workers-1) and seq the request's index in the run (0, 1, …,
// unique across workers). It is called from every worker at once, so it
// must be safe for concurrent use.
type Factory func(worker, seq int) Request

// Config describes a run. Requests and Duration bound it; at least one must
// be set, and whichever is reached first ends the run.
type Config struct {
	// BaseURL is the scheme and host the requests go to, such as
	// "http://127.0.0.1:8080". Required.
	BaseURL string
	// Workers is how many requests are in flight at once. Required,
	// positive.
	Workers int
	// Requests is the total number of requests to send; zero means no
	// count bound (Duration must then be set).
	Requests int
	// Duration is how long to keep starting requests; zero means no time
	// bound (Requests must then be set). Requests in flight when it ends
	// are let finish and counted.
	Duration time.Duration
	// Pace, when positive, is the least time between the starts of two
	// requests of one worker, so that Workers/Pace bounds the request
	// rate. Zero means as fast as the answers come back.
	Pace time.Duration
	// Factory makes each request. Required.
	Factory Factory
	// Client sends the requests; nil means NewClient(Workers, 10s).
	Client *http.Client
}

// CallerStats are one caller's counts.
type CallerStats struct {
	// ByStatus counts the answers by HTTP status code.
	ByStatus map[int]int
	// Errors counts the requests that got no HTTP answer.
	Errors int
	// NoRetryAfter counts the 429 answers without a Retry-After header.
	NoRetryAfter int
}

// Result is what a run measured.
type Result struct {
	// Requests is how many requests were sent and finished, answered or
	// not: the sum of ByStatus and Errors.
	Requests int
	// ByStatus counts the answers by HTTP status code.
	ByStatus map[int]int
	// Errors counts transport errors: requests that got no HTTP answer
	// (refused or reset connection, timeout, truncated body).
	Errors int
	// ErrorSample holds up to five distinct transport error messages.
	ErrorSample []string
	// ByCaller holds the counts per Request.Caller.
	ByCaller map[string]*CallerStats
	// NoRetryAfter counts the 429 answers without a Retry-After header.
	NoRetryAfter int
	// Latencies holds every answered request's latency, from sending the
	// request to reading the last byte of the body, sorted ascending.
	Latencies []time.Duration
	// Elapsed is the wall time of the run.
	Elapsed time.Duration
}

// Status returns how many answers had HTTP status code.
func (r *Result) Status(code int) int { return r.ByStatus[code] }

// Class returns how many answers had a status code in the class: 2 for
// 2xx, 5 for 5xx and so on.
func (r *Result) Class(class int) int {
	n := 0
	for code, c := range r.ByStatus {
		if code/100 == class {
			n += c
		}
	}
	return n
}

// Percentile returns the latency at percentile p (0 < p <= 100) by the
// nearest-rank method: the smallest recorded latency that at least p% of
// the latencies do not exceed. It returns 0 when nothing was recorded or p
// is out of range.
func (r *Result) Percentile(p float64) time.Duration {
	return Percentile(r.Latencies, p)
}

// Max returns the largest recorded latency, or 0.
func (r *Result) Max() time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	return r.Latencies[len(r.Latencies)-1]
}

// RPS returns the answered requests per second of wall time.
func (r *Result) RPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(len(r.Latencies)) / r.Elapsed.Seconds()
}

// Merge adds o's counts and latencies to r (Elapsed adds up too), so that
// the rounds of an interleaved measurement can be reported as one.
func (r *Result) Merge(o *Result) {
	if r.ByStatus == nil {
		r.ByStatus = map[int]int{}
	}
	if r.ByCaller == nil {
		r.ByCaller = map[string]*CallerStats{}
	}
	r.mergeUnsorted(o)
	r.Elapsed += o.Elapsed
	slices.Sort(r.Latencies)
}

func (r *Result) caller(name string) *CallerStats {
	cs := r.ByCaller[name]
	if cs == nil {
		cs = &CallerStats{ByStatus: map[int]int{}}
		r.ByCaller[name] = cs
	}
	return cs
}

func (r *Result) noteError(msg string) {
	if len(r.ErrorSample) < 5 && !slices.Contains(r.ErrorSample, msg) {
		r.ErrorSample = append(r.ErrorSample, msg)
	}
}

// Percentile returns the value at percentile p (0 < p <= 100) of sorted, an
// ascending slice, by the nearest-rank method; 0 when sorted is empty or p
// is out of range.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 || !(p > 0 && p <= 100) {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

// NewClient returns an HTTP client for a load of conns concurrent
// requests to one host: keep-alive on, conns idle connections kept per
// host so that a closed loop reuses its connections, no proxy from the
// environment, and timeout on each whole request (zero means none).
func NewClient(conns int, timeout time.Duration) *http.Client {
	if conns < 1 {
		conns = 1
	}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        2 * conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// tally is one worker's counts, merged into the Result at the end.
type tally struct {
	res       Result
	latencies []time.Duration
}

// Run performs the run cfg describes and returns what it measured. It
// stops starting requests when Requests have been started, Duration has
// passed or ctx is done, whichever comes first, and returns once the
// requests in flight have finished. A run cut short by ctx returns its
// Result so far together with ctx's error; requests cancelled that way are
// not counted as transport errors.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	switch {
	case cfg.Requests == 0 && cfg.Duration == 0:
		return nil, ErrNoBound
	case cfg.Requests < 0:
		return nil, fmt.Errorf("%w: Requests %d is negative", ErrBadConfig, cfg.Requests)
	case cfg.Duration < 0:
		return nil, fmt.Errorf("%w: Duration %v is negative", ErrBadConfig, cfg.Duration)
	case cfg.Workers < 1:
		return nil, fmt.Errorf("%w: Workers must be positive, got %d", ErrBadConfig, cfg.Workers)
	case cfg.Pace < 0:
		return nil, fmt.Errorf("%w: Pace %v is negative", ErrBadConfig, cfg.Pace)
	case cfg.Factory == nil:
		return nil, fmt.Errorf("%w: Factory is required", ErrBadConfig)
	case !strings.HasPrefix(cfg.BaseURL, "http://") && !strings.HasPrefix(cfg.BaseURL, "https://"):
		return nil, fmt.Errorf("%w: BaseURL %q: want an http or https URL such as http://127.0.0.1:8080", ErrBadConfig, cfg.BaseURL)
	}
	base := strings.TrimSuffix(cfg.BaseURL, "/")
	client := cfg.Client
	if client == nil {
		client = NewClient(cfg.Workers, 10*time.Second)
		defer client.CloseIdleConnections() // its connections end with the run
	}
	workers := cfg.Workers
	if cfg.Requests > 0 && cfg.Requests < workers {
		workers = cfg.Requests
	}

	start := time.Now()
	var deadline time.Time
	if cfg.Duration > 0 {
		deadline = start.Add(cfg.Duration)
	}
	var next atomic.Int64
	tallies := make([]tally, workers)
	var wg sync.WaitGroup
	for w := range workers {
		t := &tallies[w]
		t.res = Result{ByStatus: map[int]int{}, ByCaller: map[string]*CallerStats{}}
		wg.Go(func() {
			var pace *time.Timer
			if cfg.Pace > 0 {
				pace = time.NewTimer(time.Hour)
				pace.Stop()
				defer pace.Stop()
			}
			for {
				if ctx.Err() != nil || (!deadline.IsZero() && !time.Now().Before(deadline)) {
					return
				}
				seq := int(next.Add(1) - 1)
				if cfg.Requests > 0 && seq >= cfg.Requests {
					return
				}
				began := time.Now()
				req := cfg.Factory(w, seq)
				t.do(ctx, client, base, req)
				if pace != nil {
					wait := cfg.Pace - time.Since(began)
					if !deadline.IsZero() {
						wait = min(wait, time.Until(deadline))
					}
					if wait > 0 {
						pace.Reset(wait)
						select {
						case <-pace.C:
						case <-ctx.Done():
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
	res := &Result{ByStatus: map[int]int{}, ByCaller: map[string]*CallerStats{}}
	n := 0
	for i := range tallies {
		n += len(tallies[i].latencies)
	}
	res.Latencies = make([]time.Duration, 0, n)
	for i := range tallies {
		t := &tallies[i]
		t.res.Latencies = t.latencies
		res.mergeUnsorted(&t.res)
	}
	slices.Sort(res.Latencies)
	res.Elapsed = time.Since(start)
	return res, ctx.Err()
}

// mergeUnsorted is Merge without the sort or the Elapsed sum.
func (r *Result) mergeUnsorted(o *Result) {
	r.Requests += o.Requests
	r.Errors += o.Errors
	r.NoRetryAfter += o.NoRetryAfter
	for code, n := range o.ByStatus {
		r.ByStatus[code] += n
	}
	for name, cs := range o.ByCaller {
		mine := r.caller(name)
		mine.Errors += cs.Errors
		mine.NoRetryAfter += cs.NoRetryAfter
		for code, n := range cs.ByStatus {
			mine.ByStatus[code] += n
		}
	}
	for _, e := range o.ErrorSample {
		r.noteError(e)
	}
	r.Latencies = append(r.Latencies, o.Latencies...)
}

// do sends one request and records its outcome in t.
func (t *tally) do(ctx context.Context, client *http.Client, base string, req Request) {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	hreq, err := http.NewRequestWithContext(ctx, method, base+req.Path, nil)
	if err != nil {
		t.fail(req.Caller, err)
		return
	}
	for k, vs := range req.Header {
		hreq.Header[k] = vs
	}
	began := time.Now()
	resp, err := client.Do(hreq)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	took := time.Since(began)
	if err != nil {
		if ctx.Err() != nil {
			return // cancelled by the caller: not the server's failure
		}
		t.fail(req.Caller, err)
		return
	}
	t.res.Requests++
	t.res.ByStatus[resp.StatusCode]++
	cs := t.res.caller(req.Caller)
	cs.ByStatus[resp.StatusCode]++
	if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
		t.res.NoRetryAfter++
		cs.NoRetryAfter++
	}
	t.latencies = append(t.latencies, took)
}

func (t *tally) fail(caller string, err error) {
	t.res.Requests++
	t.res.Errors++
	t.res.caller(caller).Errors++
	t.res.noteError(err.Error())
}
