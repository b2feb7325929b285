package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/engine"
)

// simulateNamespace is the one namespace every key of a trace lives in.
const simulateNamespace = "simulate"

const simulateUsage = `Usage: sluice simulate --algorithm NAME --limit N --window DUR [--burst N]
       sluice simulate --algorithm fixed_window|sliding_counter --limit N --calendar UNIT [--timezone ZONE] [--anchor A]
       [--store FILE] [--backend memory|pebble|bolt --dir DIR --durability sync|interval]
       [--backend redis --redis-addr HOST:PORT[,HOST:PORT...] --redis-prefix P --redis-timeout D --redis-breaker B]

Simulate reads one JSON request per line from stdin,

	{"t": <Unix seconds>, "key": "<caller>", "cost": <integer, default 1>}

and writes one JSON decision per line to stdout, as soon as it is decided:

	{"allowed": true, "limit": 5, "remaining": 4, "retry_after": 0, "delay": 0, "reset": 12, "key": "u-1"}

or {"error": "<message>"} for a cost the limiter refuses (zero or less, or
above the capacity). The engine's clock is set to each request's t; times
and durations are exact seconds. With --calendar the windows follow the
calendar of --timezone instead (a day, a week, a month or a year, from
--anchor), as a rule's calendar, timezone and anchor fields do. Blank lines are skipped. Every line needs
a key, of 1 to 4096 bytes; a line without one, or that does not parse,
stops the trace with exit status 2 and its line number.

The store is memory unless --store names a file with a store section (a
gateway configuration, or a store section alone, as sluice rls reads it:
a Redis with a password, TLS or Sentinels is reached as the gateways reach
it; a store on disk is refused, as the gateway's own directory); the store
flags go over the file's, field by field.

With --backend redis the records live in Redis under a key prefix of the
run's own (the --redis-prefix, then simulate:<random>:), stepped on the
trace's clock rather than Redis' (so the answers are those of --backend
memory), and are deleted when the trace ends. A run killed part-way leaves
its records for Redis to expire (an hour at least).

Flags:
`

// runSimulate is the simulate command.
func runSimulate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	limit, bf, err := parseSimulateFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		printSimulateUsage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice simulate: %v\nRun 'sluice simulate -h' for usage.\n", err)
		return 2
	}
	bf.fakeClock = true
	if bf.name == "redis" {
		setRedisLogger(nil) // errors are reported with the line at fault
		// A prefix of the run's own, so that runs sharing a Redis never
		// see each other's records; the trace is not on a request path,
		// so a call may take its time.
		bf.redis.KeyPrefix += "simulate:" + randomHex(8) + ":"
		bf.redis.Timeout = simulateRedisTimeout
	}
	b, opts, err := openBackend(bf)
	if err != nil {
		fmt.Fprintf(stderr, "sluice simulate: %v\n", err)
		var ue *usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	clock := engine.NewFakeClock(time.Unix(0, 0))
	opts.Clock = clock
	eng, err := engine.New(b, &opts)
	if err != nil {
		b.Close()
		fmt.Fprintf(stderr, "sluice simulate: %v\n", err)
		return 1
	}
	code := simulate(eng, clock, limit, stdin, stdout, stderr)
	if bf.name == "redis" {
		if err := deleteAll(eng.Backend()); err != nil && code == 0 {
			fmt.Fprintf(stderr, "sluice simulate: deleting the run's records from Redis: %v\n", err)
			code = 1
		}
	}
	if err := eng.Close(); err != nil && code == 0 {
		fmt.Fprintf(stderr, "sluice simulate: closing the store: %v\n", err)
		code = 1
	}
	return code
}

// simulateRedisTimeout is each Redis call's deadline under simulate.
const simulateRedisTimeout = 5 * time.Second

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// deleteAll deletes every record b lists (a store under a prefix of its
// own).
func deleteAll(b backend.Backend) error {
	r, ok := b.(rangeStore)
	if !ok {
		return fmt.Errorf("%T cannot list its records", b)
	}
	var keys [][]byte
	if err := r.Range(nil, func(rec backend.Record) bool {
		keys = append(keys, rec.Key)
		return true
	}); err != nil {
		return err
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// calendarFlags are simulate's calendar flags: a rule's calendar,
// timezone and anchor fields.
type calendarFlags struct{ unit, zone, anchor *string }

func newSimulateFlags() (*flag.FlagSet, *string, *int64, *time.Duration, *int64, *backendFlags) {
	fs := flag.NewFlagSet("sluice simulate", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by runSimulate
	fs.Usage = func() {}
	name := fs.String("algorithm", "", "the algorithm, by `name`: "+algoNames()+" (required)")
	limit := int64Flag(fs, "limit", "at most `N` units may be spent per window (required)")
	window := new(time.Duration)
	fs.Func("window", "the window, a Go `duration` such as 250ms, 1s or 1m (required)", func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("want a duration such as 1m or 500ms")
		}
		*window = d
		return nil
	})
	burst := int64Flag(fs, "burst", "the capacity `N` of a bucket algorithm (token_bucket, leaky_bucket, gcra); default the limit")
	fs.String("calendar", "", "windows that follow the calendar, by `unit`: day, week, month or year (fixed_window and sliding_counter; instead of --window)")
	fs.String("timezone", "", "the calendar's time `zone`, an IANA name such as Europe/Berlin; default UTC")
	fs.String("anchor", "", "where each calendar window starts: \"06:00\" (day), \"monday\" (week), \"15\" or \"15 06:00\" (month), \"04-06\" (year); default midnight of the first day")
	addStoreFileFlag(fs)
	bf := addBackendFlags(fs)
	return fs, name, limit, window, burst, bf
}

func printSimulateUsage(w io.Writer) {
	fs, _, _, _, _, _ := newSimulateFlags()
	fmt.Fprint(w, simulateUsage)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// int64Flag defines an integer flag whose bad value is reported as "want
// an integer" (the flag package's own Int64 says "parse error").
func int64Flag(fs *flag.FlagSet, name, usage string) *int64 {
	v := new(int64)
	fs.Func(name, usage, func(s string) error {
		n, err := strconv.ParseInt(s, 0, 64)
		if err != nil {
			return errors.New("want an integer")
		}
		*v = n
		return nil
	})
	return v
}

// flagNames maps an algo.ParamError's field to the flag that sets it.
var flagNames = map[string]string{"limit": "--limit", "window": "--window", "burst": "--burst"}

// parseSimulateFlags parses simulate's command line into the limit to apply
// and the store to open. Every error names the flag at fault.
func parseSimulateFlags(args []string) (engine.Limit, backendFlags, error) {
	fs, name, limit, window, burst, bf := newSimulateFlags()
	if err := parseFlags(fs, args); err != nil {
		return engine.Limit{}, backendFlags{}, err
	}
	if fs.NArg() > 0 {
		return engine.Limit{}, backendFlags{}, usagef("unexpected argument %q (the trace is read from stdin)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	period := "window"
	if set["calendar"] {
		period = "calendar"
	}
	for _, f := range []string{"algorithm", "limit", period} {
		if !set[f] {
			return engine.Limit{}, backendFlags{}, usagef("--%s: required", f)
		}
	}
	if !algo.Name(*name).Known() {
		return engine.Limit{}, backendFlags{}, usagef("--algorithm %s: unknown algorithm (want one of %s)", *name, algoNames())
	}
	if set["burst"] && *burst <= 0 {
		return engine.Limit{}, backendFlags{}, usagef("--burst: must be positive when set, got %d", *burst)
	}
	flagValue := func(f string) string { return fs.Lookup(f).Value.String() }
	var (
		a   algo.Algorithm
		err error
	)
	if set["calendar"] || set["timezone"] || set["anchor"] {
		// Checked as a rule's fields are, each error naming its flag.
		a, err = calendarAlgorithm(sluice.Rule{Name: simulateNamespace, PathPrefix: "/", Scope: sluice.ScopeGlobal,
			Algorithm: algo.Name(*name), Limit: *limit, Window: *window, Burst: *burst,
			Calendar: flagValue("calendar"), Timezone: flagValue("timezone"), Anchor: flagValue("anchor")})
	} else {
		a, err = algo.New(algo.Name(*name), algo.Params{Limit: *limit, Window: *window, Burst: *burst})
	}
	if err != nil {
		var re *sluice.RuleError
		if errors.As(err, &re) {
			return engine.Limit{}, backendFlags{}, usagef("--%s: %s", re.Field, re.Reason)
		}
		var pe *algo.ParamError
		if errors.As(err, &pe) {
			f := flagNames[pe.Field]
			if f == "" {
				f = "--" + pe.Field
			}
			return engine.Limit{}, backendFlags{}, usagef("%s: %s", f, pe.Reason)
		}
		return engine.Limit{}, backendFlags{}, usagef("--algorithm: %v", err)
	}
	out := *bf
	if path := fs.Lookup("store").Value.String(); path != "" {
		fileStore, err := storeFile(path)
		if err != nil {
			return engine.Limit{}, backendFlags{}, err
		}
		if fileStore.name == "pebble" || fileStore.name == "bolt" {
			// A gateway's own directory: a trace's records would stay in
			// it beside its callers'. A trace on disk gets a directory of
			// its own, through --backend and --dir.
			return engine.Limit{}, backendFlags{}, usagef("--store: %s's store is %s on disk, which simulate does not write into; give a directory of the trace's own with --backend %s --dir DIR", path, fileStore.name, fileStore.name)
		}
		out = bf.over(fileStore)
	}
	return engine.Limit{Namespace: simulateNamespace, Algorithm: a}, out, nil
}

// calendarAlgorithm returns the algorithm of a calendar rule r, or r's
// *sluice.RuleError.
func calendarAlgorithm(r sluice.Rule) (algo.Algorithm, error) {
	rs, err := sluice.NewRuleset([]sluice.Rule{r}, nil, sluice.MatchMostSpecific)
	if err != nil {
		return nil, err
	}
	return rs.Rule(r.Name).Limit().Algorithm, nil
}

// simulate decides every line of in under limit, writing one answer per
// line to out, and returns the exit status.
//
// Output is buffered, and flushed whenever the input holds no further
// complete line: every answer is written before simulate blocks waiting for
// more input, while a long trace read in one go costs one write per buffer.
func simulate(eng *engine.Engine, clock *engine.FakeClock, limit engine.Limit, in io.Reader, out, errOut io.Writer) int {
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriterSize(out, 64<<10)
	fields := make(map[string]json.RawMessage, 4)
	var (
		long []byte // a line longer than r's buffer, assembled
		buf  []byte // the answer being written
	)
	fail := func(code int, format string, args ...any) int {
		w.Flush() // the answers before the failure still count
		fmt.Fprintf(errOut, "sluice simulate: "+format+"\n", args...)
		return code
	}
	for n := 1; ; n++ {
		if !lineBuffered(r) {
			if err := w.Flush(); err != nil {
				return fail(1, "writing: %v", err)
			}
		}
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fail(1, "reading: %v", err)
		}
		if len(trimSpace(line)) > 0 { // blank lines are skipped
			req, perr := parseLine(line, fields)
			if perr != nil {
				return fail(2, "line %d: %v", n, perr)
			}
			clock.SetUnixNano(req.T)
			d, derr := eng.Apply(context.Background(), limit, req.Key, req.Cost)
			switch {
			case derr == nil:
				buf = appendDecision(buf[:0], d, req.Key)
			case errors.Is(derr, engine.ErrInvalidCost), errors.Is(derr, engine.ErrCostExceedsCapacity):
				buf = append(appendJSONString(append(buf[:0], `{"error":`...), derr.Error()), "}\n"...)
			default:
				return fail(1, "line %d: %v", n, derr)
			}
			if _, err := w.Write(buf); err != nil {
				return fail(1, "writing: %v", err)
			}
		}
		if err != nil { // io.EOF, after the last line
			if err := w.Flush(); err != nil {
				return fail(1, "writing: %v", err)
			}
			return 0
		}
	}
}

// lineBuffered reports whether r's buffer already holds a complete line, so
// that reading it cannot block.
func lineBuffered(r *bufio.Reader) bool {
	b, _ := r.Peek(r.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
}

// appendDecision appends d as simulate's JSON answer line for key.
func appendDecision(dst []byte, d algo.Decision, key string) []byte {
	dst = append(dst, `{"allowed":`...)
	dst = strconv.AppendBool(dst, d.Allowed)
	dst = append(dst, `,"limit":`...)
	dst = strconv.AppendInt(dst, d.Limit, 10)
	dst = append(dst, `,"remaining":`...)
	dst = strconv.AppendInt(dst, d.Remaining, 10)
	dst = append(dst, `,"retry_after":`...)
	dst = appendSeconds(dst, int64(d.RetryAfter))
	dst = append(dst, `,"delay":`...)
	dst = appendSeconds(dst, int64(d.Delay))
	dst = append(dst, `,"reset":`...)
	dst = appendSeconds(dst, int64(d.Reset))
	dst = append(dst, `,"key":`...)
	dst = appendJSONString(dst, key)
	return append(dst, "}\n"...)
}

// algoNames lists algo.Names, comma-separated, for usage and its errors.
func algoNames() string {
	names := make([]string, len(algo.Names))
	for i, n := range algo.Names {
		names[i] = string(n)
	}
	return strings.Join(names, ", ")
}
