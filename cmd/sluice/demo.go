package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
)

// demoStart is the fake clock's time when the demo begins: a whole minute,
// so that every window the demo uses starts there.
var demoStart = time.Unix(1_700_000_040, 0)

// restartAt is when the demo's restart section runs on the fake clock, and
// restartGap how long after it the second process looks.
var (
	restartAt  = demoStart.Add(time.Hour)
	restartGap = 3 * time.Second
)

const demoUsage = `Usage: sluice demo [--backend pebble|bolt|memory] [--dir DIR] [--resume] [--out FILE]

Demo runs the reference design's demo scenarios through the engine with a fake
clock and prints what each one answered. With a durable backend (Pebble under
./var/demo by default) it starts from an empty directory and ends by spending
a budget; run it again with --resume, as a new process on the same directory,
to see that budget survive the restart.

Flags:
`

// runDemo is the demo command.
func runDemo(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	out := fs.String("out", "", "write the output to `file` instead of stdout")
	bf := backendFlags{}
	fs.StringVar(&bf.name, "backend", "pebble", "the `store`: pebble, bolt or memory")
	fs.StringVar(&bf.dir, "dir", "var/demo", "the durable store's `directory`; the demo empties it unless --resume is given")
	resume := fs.Bool("resume", false, "continue from the state a previous run left in --dir, as a restarted gateway would")
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, demoUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "sluice demo: %v\nRun 'sluice demo -h' for usage.\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice demo: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	switch bf.name {
	case "memory", "pebble", "bolt":
	default:
		fmt.Fprintf(stderr, "sluice demo: --backend %s: the demo runs on pebble, bolt or memory\n", bf.name)
		return 2
	}
	if bf.name == "memory" {
		if *resume {
			fmt.Fprintln(stderr, "sluice demo: --resume: the memory backend keeps nothing across processes")
			return 2
		}
		bf.dir = ""
	} else if !*resume {
		if err := os.RemoveAll(bf.dir); err != nil {
			fmt.Fprintf(stderr, "sluice demo: %v\n", err)
			return 1
		}
	}
	bf.fakeClock = true
	var buf bytes.Buffer
	if err := demo(&buf, bf, *resume); err != nil {
		fmt.Fprintf(stderr, "sluice demo: %v\n", err)
		return 1
	}
	if *out != "" {
		if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
			fmt.Fprintf(stderr, "sluice demo: %v\n", err)
			return 1
		}
		return 0
	}
	if _, err := stdout.Write(buf.Bytes()); err != nil {
		fmt.Fprintf(stderr, "sluice demo: writing: %v\n", err)
		return 1
	}
	return 0
}

// demo writes the demo's report to w. Every figure in it is an answer of
// the engine, over the store bf names, with a fake clock. With resume it runs
// only the restart check, against the state a previous run left.
func demo(w *bytes.Buffer, bf backendFlags, resume bool) error {
	b, opts, err := openBackend(bf)
	if err != nil {
		return err
	}
	clock := engine.NewFakeClock(demoStart)
	opts.Clock = clock
	eng, err := engine.New(b, &opts)
	if err != nil {
		b.Close()
		return err
	}
	defer eng.Close()

	g, err := newGateway(eng)
	if err != nil {
		return err
	}
	defer g.Close()
	if resume {
		return demoResumed(w, g, clock, bf)
	}
	for _, section := range []func(io.Writer, *gateway) error{demoOrders, demoSearch, demoAnonymous} {
		if err := section(w, g); err != nil {
			return err
		}
	}
	if err := demoBurst(w, eng, clock); err != nil {
		return err
	}
	if err := demoBoundary(w, eng, clock); err != nil {
		return err
	}
	if err := demoHousekeeping(w, eng, clock, g); err != nil {
		return err
	}
	if bf.dir == "" {
		return nil
	}
	return demoBeforeRestart(w, g, clock, bf)
}

// restartUser is the user whose order budget the restart sections spend.
const restartUser = "u-2"

// demoBeforeRestart spends a user's whole order budget just before this
// process exits.
func demoBeforeRestart(w io.Writer, g *gateway, clock *engine.FakeClock, bf backendFlags) error {
	clock.Set(restartAt)
	rule := g.rule("orders-write")
	fmt.Fprintf(w, "--- budgets live in %s under %s ---\n", bf.name, bf.dir)
	allowed, denied := 0, 0
	var last demoResponse
	for range 7 {
		resp, err := g.send(rule.Method, rule.PathPrefix, restartUser)
		if err != nil {
			return err
		}
		last = resp
		if resp.status == http.StatusTooManyRequests {
			denied++
		} else {
			allowed++
		}
	}
	fmt.Fprintf(w, "  %s %s from user %s: allowed %d, denied %d, Retry-After %s; this process now exits\n",
		rule.Method, rule.PathPrefix, restartUser, allowed, denied, last.header.Get("Retry-After"))
	return nil
}

// demoResumed is the second process: the same user, a few seconds later.
func demoResumed(w io.Writer, g *gateway, clock *engine.FakeClock, bf backendFlags) error {
	clock.Set(restartAt.Add(restartGap))
	rule := g.rule("orders-write")
	fmt.Fprintf(w, "--- a new process on the same %s directory, %v later ---\n", bf.name, restartGap)
	resp, err := g.send(rule.Method, rule.PathPrefix, restartUser)
	if err != nil {
		return err
	}
	verdict := "the budget survived the restart"
	if resp.status != http.StatusTooManyRequests {
		verdict = "the budget was LOST in the restart"
	}
	fmt.Fprintf(w, "  %s %s from user %s -> %d, Retry-After %s: %s\n",
		rule.Method, rule.PathPrefix, restartUser, resp.status, resp.header.Get("Retry-After"), verdict)
	if resp.status != http.StatusTooManyRequests {
		return errors.New("restart check failed: a restarted process handed out a fresh budget")
	}
	return nil
}

// demoOrders sends a burst of order submissions from one user.
func demoOrders(w io.Writer, g *gateway) error {
	const n = 7
	const user = "u-1"
	rule := g.rule("orders-write")
	fmt.Fprintf(w, "--- %d %s %s from user %s, limit %d per %s ---\n", n, rule.Method, rule.PathPrefix, user, rule.Limit, per(rule.Window))
	var (
		allowed, denied int
		last, denial    demoResponse
	)
	for range n {
		resp, err := g.send(rule.Method, rule.PathPrefix, user)
		if err != nil {
			return err
		}
		last = resp
		if resp.status == http.StatusTooManyRequests {
			denied++
			denial = resp
		} else {
			allowed++
		}
	}
	fmt.Fprintf(w, "  allowed %d, denied %d, last body: %s\n", allowed, denied, last.body)
	fmt.Fprintf(w, "  429 headers: %s\n", formatHeaders(denial.header, rateLimitHeaders...))
	return nil
}

// demoSearch spends a costly search three times: another rule, another
// budget, for the same user.
func demoSearch(w io.Writer, g *gateway) error {
	rule := g.rule("search")
	fmt.Fprintln(w, "--- the same user on a different route uses a different budget ---")
	var statuses []string
	limit := ""
	for range 3 {
		resp, err := g.send(rule.Method, rule.PathPrefix+"?q=sluice", "u-1")
		if err != nil {
			return err
		}
		statuses = append(statuses, strconv.Itoa(resp.status))
		limit = resp.header.Get("X-RateLimit-Limit")
	}
	fmt.Fprintf(w, "  cost=%d against a limit of %s: %s, then %s\n", rule.Cost, limit, strings.Join(statuses[:len(statuses)-1], ", "), statuses[len(statuses)-1])
	return nil
}

// demoAnonymous sends a request no rule names from a caller with no user:
// the default rule counts it by IP, here the loopback address the demo's
// client connects from.
func demoAnonymous(w io.Writer, g *gateway) error {
	const method, path = "GET", "/health"
	fmt.Fprintln(w, "--- an anonymous request falls through to the IP rule ---")
	resp, err := g.send(method, path, "")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  %s %s -> %d, %s\n", method, path, resp.status, formatHeaders(resp.header, rateLimitHeaders...))
	return nil
}

// demoBurst sends the same burst through every algorithm.
func demoBurst(w io.Writer, eng *engine.Engine, clock *engine.FakeClock) error {
	const n = 5
	const burst = 7
	p := algo.Params{Limit: n, Window: time.Second}
	clock.Set(demoStart)
	fmt.Fprintf(w, "--- limit %d per %s, %d requests arrive together at t=0 ---\n", p.Limit, per(p.Window), burst)
	for _, name := range algo.Names {
		a, err := algo.New(name, p)
		if err != nil {
			return err
		}
		l := engine.Limit{Namespace: "burst-" + string(name), Algorithm: a}
		var allowed, denied int
		var retry time.Duration
		for range burst {
			d, err := eng.Apply(context.Background(), l, "u-1", 1)
			if err != nil {
				return err
			}
			if d.Allowed {
				allowed++
			} else {
				denied++
				retry = d.RetryAfter
			}
		}
		fmt.Fprintf(w, "  %-15s : %d allowed, %d denied, Retry-After %.2f s\n", displayName(name), allowed, denied, retry.Seconds())
	}
	return nil
}

// demoBoundary sends a burst just before a window boundary and another just
// after it, through the fixed window and the sliding counter.
func demoBoundary(w io.Writer, eng *engine.Engine, clock *engine.FakeClock) error {
	const n = 5
	first, second := 900*time.Millisecond, time.Second
	p := algo.Params{Limit: n, Window: time.Second}
	fmt.Fprintf(w, "--- boundary burst: %d requests at t+%.1f s, %d more at t+%.1f s ---\n", n, first.Seconds(), n, second.Seconds())
	for _, name := range []algo.Name{algo.FixedWindowName, algo.SlidingCounterName} {
		a, err := algo.New(name, p)
		if err != nil {
			return err
		}
		l := engine.Limit{Namespace: "boundary-" + string(name), Algorithm: a}
		var allowed [2]int
		for i, at := range []time.Duration{first, second} {
			clock.Set(demoStart.Add(at))
			for range n {
				d, err := eng.Apply(context.Background(), l, "u-1", 1)
				if err != nil {
					return err
				}
				if d.Allowed {
					allowed[i]++
				}
			}
		}
		fmt.Fprintf(w, "  %-15s : %d allowed, then %d more within %.1f s\n", displayName(name), allowed[0], allowed[1], (second - first).Seconds())
	}
	return nil
}

// demoHousekeeping counts the keys the demo left behind, lets them all go
// idle and sweeps them, then prints the gateway's per-rule counters.
func demoHousekeeping(w io.Writer, eng *engine.Engine, clock *engine.FakeClock, g *gateway) error {
	const idle = 10 * time.Minute
	fmt.Fprintln(w, "--- housekeeping ---")
	held := eng.Len()
	if held < 0 {
		return errors.New("the store cannot count its keys")
	}
	clock.Advance(idle)
	evicted := 0
	// Each Sweep visits every shard once; more than one pass is needed only
	// when a shard holds more keys than a sweep examines per visit.
	for pass := 0; pass < 1000 && eng.Len() > 0; pass++ {
		n, err := eng.Sweep(math.MaxInt)
		if err != nil {
			return err
		}
		evicted += n
	}
	fmt.Fprintf(w, "  keys held: %d, evicted after %d min idle: %d\n", held, int(idle/time.Minute), evicted)
	counters, err := g.formatMetrics()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  %s\n", counters)
	return nil
}

// per names a window as the unit of a rate: "second", "minute", "hour", or
// the duration itself.
func per(window time.Duration) string {
	switch window {
	case time.Second:
		return "second"
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	}
	return window.String()
}

// displayName turns an algorithm's configuration name into words.
func displayName(name algo.Name) string { return strings.ReplaceAll(string(name), "_", " ") }
