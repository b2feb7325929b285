// Command work counts what one decision costs in work rather than time:
// the instructions it executes and the cache misses it takes, for Sluice's
// in-process decision and for the fastest peers, under valgrind's callgrind.
// Time per decision moves with the machine and with whatever else runs on
// it; the instructions of a decision do not move at all, and its misses in
// callgrind's cache model (a 32 KiB first level and, standing in for a
// core's second level, 512 KiB, both 8-way with 64-byte lines) move only
// with the code and the workload. A lead that does less work per decision
// is a lead on any machine of the kind.
//
// Each row runs one benchmark twice under callgrind, for -n and 3×-n
// decisions, counting only inside the decision's function
// (--toggle-collect), and divides the difference by 2×-n: what the setup
// and the first -n cost cancels out. Sluice's rows come from engine's
// BenchmarkApplyStill, whose clock stands still and whose store runs no
// sweeper, so that the simulator's slowness changes nothing in them; the
// peers' rows from this module's suite (go-limiter's Take, x/time/rate's
// Allow behind its sync.Map, as the suite deploys it per key). The 100,000
// keys are walked in creation order (Keys100k, BenchmarkApplyStill) or, for
// the peers, also in random order (Keys100kShuffled).
//
// valgrind must be on PATH (Debian: apt-get install -y valgrind). Run it
// from bench/ (or `make bench-work` from the repository's root); it takes a
// few minutes on two cores:
//
//	go run ./cmd/work [-n 100000] [-out out/work.md]
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Row is one measured decision.
type Row struct {
	// Name labels the row in the table.
	Name string
	// Binary is "engine" (the main module's engine tests) or "bench"
	// (this module's suite).
	Binary string
	// Bench is the -test.bench pattern that runs exactly one benchmark.
	Bench string
	// Func is callgrind's --toggle-collect pattern: the decision's function.
	Func string
}

// Rows are the decisions measured, in the table's order.
var Rows = []Row{
	{"Sluice ApplyKeyInto, hot key, GCRA", "engine", `^BenchmarkApplyStill$/^keys=1$/^allowed$/^gcra\+key$`, "*engine.(*Engine).Apply*"},
	{"Sluice ApplyKeyInto, hot key, GCRA, denied", "engine", `^BenchmarkApplyStill$/^keys=1$/^denied$/^gcra\+key$`, "*engine.(*Engine).Apply*"},
	{"Sluice Apply, hot key, GCRA", "engine", `^BenchmarkApplyStill$/^keys=1$/^allowed$/^gcra$`, "*engine.(*Engine).Apply*"},
	{"Sluice Apply, hot key, token bucket", "engine", `^BenchmarkApplyStill$/^keys=1$/^allowed$/^token_bucket$`, "*engine.(*Engine).Apply*"},
	{"Sluice ApplyKeyInto, 100,000 keys, GCRA", "engine", `^BenchmarkApplyStill$/^keys=100000$/^allowed$/^gcra\+key$`, "*engine.(*Engine).Apply*"},
	{"Sluice ApplyKeyInto, 100,000 keys, GCRA, denied", "engine", `^BenchmarkApplyStill$/^keys=100000$/^denied$/^gcra\+key$`, "*engine.(*Engine).Apply*"},
	{"Sluice Apply, 100,000 keys, GCRA", "engine", `^BenchmarkApplyStill$/^keys=100000$/^allowed$/^gcra$`, "*engine.(*Engine).Apply*"},
	{"Sluice Apply, 100,000 keys, token bucket", "engine", `^BenchmarkApplyStill$/^keys=100000$/^allowed$/^token_bucket$`, "*engine.(*Engine).Apply*"},
	{"go-limiter Take, hot key", "bench", `^BenchmarkHotKey$/^golimiter$`, "*memorystore.(*store).Take"},
	{"go-limiter Take, 100,000 keys", "bench", `^BenchmarkKeys100k$/^golimiter$`, "*memorystore.(*store).Take"},
	{"go-limiter Take, 100,000 keys, random order", "bench", `^BenchmarkKeys100kShuffled$/^golimiter$`, "*memorystore.(*store).Take"},
	{"x/time/rate per key, hot key", "bench", `^BenchmarkHotKey$/^xtimerate$`, "*bench.(*XTimeRate).Allow"},
	{"x/time/rate per key, 100,000 keys", "bench", `^BenchmarkKeys100k$/^xtimerate$`, "*bench.(*XTimeRate).Allow"},
	{"x/time/rate per key, 100,000 keys, random order", "bench", `^BenchmarkKeys100kShuffled$/^xtimerate$`, "*bench.(*XTimeRate).Allow"},
}

// Cost is what one decision costs, per decision.
type Cost struct {
	Instructions float64
	L1Misses     float64 // data reads and writes that miss the first level
	L2Misses     float64 // of those, the ones that miss the second
}

func main() {
	log.SetFlags(0)
	if err := run(os.Args[1:], os.Stdout); err != nil {
		log.Fatal("work: ", err)
	}
}

func run(args []string, stdout io.Writer) error {
	flags := flag.NewFlagSet("work", flag.ContinueOnError)
	n := flags.Int("n", 100_000, "decisions of the shorter run of each row; the longer runs 3×")
	out := flags.String("out", "", "file to write the table to as well; empty writes none")
	match := flags.String("rows", "", "only the rows whose name contains this")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *n < 1000 {
		return fmt.Errorf("-n %d: need at least 1000 decisions", *n)
	}
	var rows []Row
	for _, r := range Rows {
		if strings.Contains(r.Name, *match) {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return fmt.Errorf("-rows %q: no row's name contains it", *match)
	}
	if _, err := exec.LookPath("valgrind"); err != nil {
		return fmt.Errorf("valgrind is not on PATH (Debian: apt-get install -y valgrind): %w", err)
	}
	dir, err := os.MkdirTemp("", "sluice-work-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bins := map[string]string{"engine": filepath.Join(dir, "engine.test"), "bench": filepath.Join(dir, "bench.test")}
	fmt.Fprintf(os.Stderr, "building the benchmarks…\n")
	for _, b := range []struct{ dir, pkg, out string }{{"..", "./engine", bins["engine"]}, {".", ".", bins["bench"]}} {
		build := exec.Command("go", "test", "-c", "-o", b.out, b.pkg)
		build.Dir, build.Stdout, build.Stderr = b.dir, os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("go test -c %s: %w", b.pkg, err)
		}
	}
	costs := make([]Cost, len(rows))
	errs := make([]error, len(rows))
	// Two rows at a time: callgrind runs one thread, and counts the same
	// whatever runs beside it.
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for i, r := range rows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			fmt.Fprintf(os.Stderr, "measuring %s…\n", r.Name)
			for try := 0; ; try++ {
				costs[i], errs[i] = measure(dir, bins[r.Binary], r, *n, i)
				if !errors.Is(errs[i], errNotPerDecision) || try == maxTries-1 {
					break
				}
				fmt.Fprintf(os.Stderr, "measuring %s again: %v\n", r.Name, errs[i])
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("%s: %w", rows[i].Name, err)
		}
	}
	var b strings.Builder
	Write(&b, rows, costs)
	fmt.Fprint(stdout, b.String())
	if *out != "" {
		return os.WriteFile(*out, []byte(b.String()), 0o644)
	}
	return nil
}

// maxTries bounds the runs of a row whose two counts do not differ by work
// per decision.
const maxTries = 3

// errNotPerDecision is measure's error when the longer run counted no more
// than the shorter: something other than the decisions (a one-off cost in
// the counted function) weighed on one of them, and the row is measured
// again.
var errNotPerDecision = errors.New("the longer run counted no more instructions than the shorter")

// measure runs r for n and 3n decisions and returns the difference per
// decision.
func measure(dir, bin string, r Row, n, id int) (Cost, error) {
	var totals [2]map[string]float64
	for k, count := range []int{n, 3 * n} {
		file := filepath.Join(dir, fmt.Sprintf("callgrind.%d.%d", id, k))
		cmd := exec.Command("valgrind", "--tool=callgrind", "--cache-sim=yes",
			"--D1=32768,8,64", "--LL=524288,8,64",
			"--callgrind-out-file="+file, "--toggle-collect="+r.Func,
			bin, "-test.run", "^$", "-test.bench", r.Bench, "-test.benchtime", strconv.Itoa(count)+"x")
		// One P and no preemption signals, so that nothing but the decisions
		// runs in the counted function; no collection, which would run at
		// a pace set by the simulator's speed rather than by the work.
		cmd.Env = append(os.Environ(), "GOGC=off", "GOMAXPROCS=1", "GODEBUG=asyncpreemptoff=1")
		outb, err := cmd.CombinedOutput()
		if err != nil {
			return Cost{}, fmt.Errorf("valgrind: %w\n%s", err, tail(outb))
		}
		if !strings.Contains(string(outb), "ns/op") {
			return Cost{}, fmt.Errorf("the pattern %q ran no benchmark:\n%s", r.Bench, tail(outb))
		}
		f, err := os.Open(file)
		if err != nil {
			return Cost{}, err
		}
		totals[k], err = ParseTotals(f)
		f.Close()
		if err != nil {
			return Cost{}, fmt.Errorf("%s: %w", file, err)
		}
	}
	return PerDecision(totals[0], totals[1], n)
}

// PerDecision returns the cost of one decision from the totals of a run of
// n decisions and of one of 3n: their difference over 2n.
func PerDecision(short, long map[string]float64, n int) (Cost, error) {
	d := func(events ...string) float64 {
		v := 0.0
		for _, e := range events {
			v += long[e] - short[e]
		}
		return v / float64(2*n)
	}
	c := Cost{Instructions: d("Ir"), L1Misses: d("D1mr", "D1mw"), L2Misses: d("DLmr", "DLmw")}
	if c.Instructions <= 0 {
		return Cost{}, fmt.Errorf("%w (%.0f against %.0f)", errNotPerDecision, long["Ir"], short["Ir"])
	}
	return c, nil
}

// ParseTotals reads a callgrind output file's event names and totals.
func ParseTotals(r io.Reader) (map[string]float64, error) {
	var events []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "events:"); ok {
			events = strings.Fields(v)
		}
		v, ok := strings.CutPrefix(line, "totals:")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(events) == 0 || len(fields) > len(events) {
			return nil, fmt.Errorf("totals %q do not match events %q", v, events)
		}
		m := make(map[string]float64, len(events))
		for i, f := range fields {
			x, err := strconv.ParseFloat(f, 64)
			if err != nil {
				return nil, fmt.Errorf("totals: %q is not a number", f)
			}
			m[events[i]] = x
		}
		return m, nil
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no totals line")
}

// Write writes the table of rows and their costs.
func Write(w io.Writer, rows []Row, costs []Cost) {
	fmt.Fprintf(w, "| decision | instructions | L1 misses | L2 misses |\n|---|---:|---:|---:|\n")
	for i, r := range rows {
		c := costs[i]
		fmt.Fprintf(w, "| %s | %.0f | %.2f | %.2f |\n", r.Name, c.Instructions, max(c.L1Misses, 0), max(c.L2Misses, 0))
	}
}

// tail returns the last lines of a command's output, for an error.
func tail(b []byte) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}
