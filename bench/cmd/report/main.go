// Command report turns the raw output of the benchmark suite (`make bench`,
// bench/out/bench.txt) into RESULTS.md: the machine, the targets met or
// missed, Sluice against the fastest peer per workload, and the median of
// every metric of every benchmark; then, in a section of its own, the
// durable-state workloads of durable_test.go (the engine over Pebble and
// bbolt): their targets, the durable engine against the memory one, sync
// mode's scaling with concurrent callers, the raw stores' floor, and cold
// start.
//
// Usage:
//
//	go run ./cmd/report -in out/bench.txt -out RESULTS.md
//
// The durable-state benchmarks are usually run on their own into
// out/durable.txt:
//
//	go test -run '^$' -bench 'Durable|SyncConcurrency|RawStore|ColdStart' -benchmem -count 3 -benchtime 500ms -timeout 30m ./... > out/durable.txt
//
// The report reads that file too when it exists (-durable, default
// out/durable.txt; an empty -durable reads none), so `make bench-report` renders
// both. A benchmark found in both files is taken from the -durable file.
//
// Everything in the output file below the notes marker is kept, so notes
// written by hand (profiles, explanations) survive a regeneration.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// notesMarker separates the generated tables from the notes kept by hand.
const notesMarker = "<!-- notes: everything below this line is written by hand and kept by cmd/report -->"

func main() {
	in := flag.String("in", "out/bench.txt", "raw `go test -bench` output to read")
	durable := flag.String("durable", "out/durable.txt", "raw output of the durable-state benchmarks, read when the file exists; its benchmarks replace -in's of the same name; empty reads none")
	out := flag.String("out", "RESULTS.md", "markdown file to write; its notes below the marker are kept")
	flag.Parse()
	log.SetFlags(0)

	res, date, err := readFile(*in)
	if err != nil {
		log.Fatal(err)
	}
	if _, ok := res.Config["date"]; !ok && date != "" {
		res.Config["date"] = date
	}
	sources := []string{*in}
	if *durable != "" {
		explicit := false
		flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "durable" })
		d, ddate, err := readFile(*durable)
		switch {
		case err == nil:
			res.Merge(d)
			sources = append(sources, *durable)
			if v, ok := d.Config["date"]; ok {
				ddate = v
			}
			if ddate != "" {
				res.Config[durableDateKey] = ddate
			}
		case errors.Is(err, fs.ErrNotExist) && !explicit:
			// No durable-state results: the report is bench.txt's alone.
		default:
			log.Fatal(err)
		}
	}
	if len(res.Order) == 0 {
		log.Fatalf("%s: no benchmark results", strings.Join(sources, ", "))
	}

	notes := "## Notes\n\nNone yet.\n"
	if old, err := os.ReadFile(*out); err == nil {
		if _, after, ok := strings.Cut(string(old), notesMarker+"\n"); ok {
			notes = after
		}
	}
	var b strings.Builder
	Write(&b, res, sources...)
	b.WriteString("\n" + notesMarker + "\n")
	b.WriteString(notes)
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		log.Fatal(err)
	}
}

// durableDateKey is the Config key main stores the durable results' date
// under.
const durableDateKey = "durable-date"

// readFile parses the benchmark output in path and returns it with the
// time the file was last written.
func readFile(path string) (*Results, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	date := ""
	if fi, err := f.Stat(); err == nil {
		date = fi.ModTime().UTC().Format("2006-01-02 15:04 MST") + " (when the results file was last written)"
	}
	res, err := Parse(f)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return res, date, nil
}

// Merge adds other's results to r: the runs of a benchmark other holds
// replace r's runs of it, and configuration lines r lacks are added.
func (r *Results) Merge(other *Results) {
	for k, v := range other.Config {
		if _, ok := r.Config[k]; !ok {
			r.Config[k] = v
		}
	}
	for _, n := range other.Order {
		if _, ok := r.Runs[n]; !ok {
			r.Order = append(r.Order, n)
		}
		r.Runs[n] = other.Runs[n]
	}
}

// Results are the runs of a benchmark output, by benchmark name.
type Results struct {
	// Config holds the "key: value" lines (goos, cpu, and the go, cores
	// and gomaxprocs lines the suite prints), first value kept. main adds
	// the date the results file was written unless it has a date line.
	Config map[string]string
	// Order lists benchmark names, without the -GOMAXPROCS suffix, in the
	// order they first appear.
	Order []string
	// Runs maps a name to its values per unit ("ns/op", "B/key", ...), one
	// value per run.
	Runs map[string]map[string][]float64
}

var (
	configLine = regexp.MustCompile(`^([a-z][^\s:]*):\s*(.*)$`)
	procs      = regexp.MustCompile(`-\d+$`)
)

// Parse reads `go test -bench` output. Lines that are neither configuration
// nor results (PASS, ok, log output) are skipped.
func Parse(r io.Reader) (*Results, error) {
	res := &Results{Config: map[string]string{}, Runs: map[string]map[string][]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if m := configLine.FindStringSubmatch(text); m != nil {
			if _, ok := res.Config[m[1]]; !ok {
				res.Config[m[1]] = m[2]
			}
			continue
		}
		fields := strings.Fields(text)
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") || len(fields)%2 != 0 {
			continue
		}
		if _, err := strconv.ParseInt(fields[1], 10, 64); err != nil {
			continue // a benchmark's own log line
		}
		name := procs.ReplaceAllString(fields[0], "")
		units := res.Runs[name]
		if units == nil {
			units = map[string][]float64{}
			res.Runs[name] = units
			res.Order = append(res.Order, name)
		}
		for i := 2; i < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %q is not a number", line, fields[i])
			}
			units[fields[i+1]] = append(units[fields[i+1]], v)
		}
	}
	return res, sc.Err()
}

// Median returns the median of name's values in unit, and false when there
// are none.
func (r *Results) Median(name, unit string) (float64, bool) {
	vs := r.Runs[name][unit]
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2], true
	}
	return (s[n/2-1] + s[n/2]) / 2, true
}

// spread returns the largest deviation of a run from the median, as a
// fraction of the median.
func (r *Results) spread(name, unit string) float64 {
	med, ok := r.Median(name, unit)
	if !ok || med == 0 {
		return 0
	}
	d := 0.0
	for _, v := range r.Runs[name][unit] {
		d = max(d, math.Abs(v-med))
	}
	return d / med
}

// split returns a benchmark's workload and implementation:
// "BenchmarkHotKey/golimiter" is ("HotKey", "golimiter").
func split(name string) (workload, impl string) {
	workload, impl, _ = strings.Cut(strings.TrimPrefix(name, "Benchmark"), "/")
	return workload, impl
}

// workloads returns the workloads in order of appearance with their
// benchmark names.
func (r *Results) workloads() ([]string, map[string][]string) {
	var order []string
	names := map[string][]string{}
	for _, n := range r.Order {
		w, _ := split(n)
		if _, ok := names[w]; !ok {
			order = append(order, w)
		}
		names[w] = append(names[w], n)
	}
	return order, names
}

// Peers are the implementations Sluice is compared with; the floor is not
// one of them.
var Peers = []string{"xtimerate", "golimiter"}

// fastestPeer returns the peer with the smallest median of unit in workload.
func (r *Results) fastestPeer(workload, unit string) (name string, v float64, ok bool) {
	for _, p := range Peers {
		if m, found := r.Median("Benchmark"+workload+"/"+p, unit); found && (!ok || m < v) {
			name, v, ok = p, m, true
		}
	}
	return name, v, ok
}

// Target is one of the goals the suite checks.
type Target struct {
	Goal  string // as stated
	Bench string // benchmark measured
	Unit  string // its metric
	Max   float64
	// Than, when set, replaces Max by that benchmark's median: the target
	// is to be faster.
	Than string
	// ZeroAllocs also requires a median of 0 allocs/op.
	ZeroAllocs bool
}

// Targets are the goals set for Sluice.
var Targets = []Target{
	{Goal: "algo.Step ≤ 25 ns/op, 0 allocs", Bench: "BenchmarkStep/token_bucket", Unit: "ns/op", Max: 25, ZeroAllocs: true},
	{Goal: "algo.Step ≤ 25 ns/op, 0 allocs", Bench: "BenchmarkStep/gcra", Unit: "ns/op", Max: 25, ZeroAllocs: true},
	{Goal: "algo.Step ≤ 25 ns/op, 0 allocs", Bench: "BenchmarkStep/leaky_bucket", Unit: "ns/op", Max: 25, ZeroAllocs: true},
	{Goal: "algo.Step ≤ 25 ns/op, 0 allocs", Bench: "BenchmarkStep/fixed_window", Unit: "ns/op", Max: 25, ZeroAllocs: true},
	{Goal: "algo.Step ≤ 25 ns/op, 0 allocs", Bench: "BenchmarkStep/sliding_counter", Unit: "ns/op", Max: 25, ZeroAllocs: true},
	{Goal: "algo.Step ≤ 25 ns/op, 0 allocs", Bench: "BenchmarkStep/sliding_log", Unit: "ns/op", Max: 25, ZeroAllocs: true},
	{Goal: "engine + memory, hot key ≤ 50 ns/op, 0 allocs", Bench: "BenchmarkHotKey/sluice-token_bucket", Unit: "ns/op", Max: 50, ZeroAllocs: true},
	{Goal: "engine + memory, hot key ≤ 50 ns/op, 0 allocs", Bench: "BenchmarkHotKey/sluice-gcra", Unit: "ns/op", Max: 50, ZeroAllocs: true},
	{Goal: "100k keys faster than go-limiter", Bench: "BenchmarkKeys100k/sluice-token_bucket", Unit: "ns/op", Than: "BenchmarkKeys100k/golimiter"},
	{Goal: "100k keys faster than go-limiter", Bench: "BenchmarkKeys100k/sluice-gcra", Unit: "ns/op", Than: "BenchmarkKeys100k/golimiter"},
	{Goal: "Parallel10k ≤ 40 ns/op", Bench: "BenchmarkParallel10k/sluice-token_bucket", Unit: "ns/op", Max: 40},
	{Goal: "Parallel10k ≤ 40 ns/op", Bench: "BenchmarkParallel10k/sluice-gcra", Unit: "ns/op", Max: 40},
	{Goal: "≤ 80 bytes per token-bucket key at 1M keys", Bench: "BenchmarkBytesPerKey/sluice-token_bucket", Unit: "B/key", Max: 80},
}

// Write writes the generated part of RESULTS.md for res, read from
// sources.
func Write(w io.Writer, res *Results, sources ...string) {
	c := res.Config
	runs := 0
	for _, units := range res.Runs {
		runs = max(runs, len(units["ns/op"]))
	}
	order, names := res.workloads()
	durable := slices.ContainsFunc(order, isDurable)
	fmt.Fprintf(w, "# Benchmark results\n\n")
	fmt.Fprintf(w, "Generated by `go run ./cmd/report` from `%s` (`make bench`, then `make bench-report`): ", strings.Join(sources, "` and `"))
	fmt.Fprintf(w, "up to %d runs of each benchmark, medians shown. ", runs)
	if durable {
		fmt.Fprintf(w, "Benchmarks and workloads are described in `doc.go`, `bench_test.go` and `durable_test.go`.\n\n")
	} else {
		fmt.Fprintf(w, "Benchmarks and workloads are described in `doc.go` and `bench_test.go`.\n\n")
	}
	fmt.Fprintf(w, "| machine | |\n| --- | --- |\n")
	rows := [][2]string{{"date", c["date"]}}
	if d, ok := c[durableDateKey]; ok {
		rows = append(rows, [2]string{"date, durable state", d})
	}
	for _, row := range append(rows, [][2]string{
		{"go", c["go"]},
		{"os/arch", c["goos"] + "/" + c["goarch"]},
		{"cpu", c["cpu"]},
		{"cores", c["cores"]},
		{"GOMAXPROCS", c["gomaxprocs"]},
	}...) {
		if row[1] == "" || row[1] == "/" {
			row[1] = "unknown"
		}
		fmt.Fprintf(w, "| %s | %s |\n", row[0], row[1])
	}

	fmt.Fprintf(w, "\n## Targets\n\n| target | benchmark | measured | status |\n| --- | --- | --- | --- |\n")
	for _, t := range Targets {
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.Goal, strings.TrimPrefix(t.Bench, "Benchmark"), t.status(res))
	}

	fmt.Fprintf(w, "\n## Sluice against the fastest peer\n\n")
	fmt.Fprintf(w, "Each Sluice median divided by the fastest peer's (x/time/rate or go-limiter) in the same workload: below 1 Sluice is faster (smaller). ")
	fmt.Fprintf(w, "The metric is ns/op, and B/key for BytesPerKey.\n\n")
	fmt.Fprintf(w, "| workload | metric | fastest peer | token_bucket | ÷ peer | allocs/op | gcra | ÷ peer | allocs/op |\n")
	fmt.Fprintf(w, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, wl := range order {
		if isDurable(wl) {
			continue
		}
		unit := "ns/op"
		if wl == "BytesPerKey" {
			unit = "B/key"
		}
		peer, pv, ok := res.fastestPeer(wl, unit)
		if !ok {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s %s |", wl, unit, peer, num(pv))
		for _, a := range []string{"token_bucket", "gcra"} {
			name := "Benchmark" + wl + "/sluice-" + a
			v, ok := res.Median(name, unit)
			if !ok {
				fmt.Fprintf(w, " – | – | – |")
				continue
			}
			fmt.Fprintf(w, " %s | %.2f× | %s |", num(v), v/pv, allocs(res, name, wl))
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintf(w, "\n## Medians\n\n")
	fmt.Fprintf(w, "*spread* is the largest deviation of one run from the median; *÷ floor* divides by floor-stripedmap's median in the same workload.\n")
	for _, wl := range order {
		if !isDurable(wl) {
			writeMedians(w, res, "###", wl, names[wl])
		}
	}
	if durable {
		writeDurable(w, res, order, names)
	}
}

// writeMedians writes the table of medians of workload wl, whose benchmarks
// are names, under a heading of the given level.
func writeMedians(w io.Writer, res *Results, heading, wl string, names []string) {
	fmt.Fprintf(w, "\n%s %s\n\n", heading, wl)
	var extra []string // custom metrics, in order of appearance
	for _, n := range names {
		for u := range res.Runs[n] {
			if !slices.Contains([]string{"ns/op", "B/op", "allocs/op"}, u) && !slices.Contains(extra, u) {
				extra = append(extra, u)
			}
		}
	}
	slices.Sort(extra)
	floor, hasFloor := res.Median("Benchmark"+wl+"/floor-stripedmap", "ns/op")
	fmt.Fprintf(w, "| impl | ns/op | spread |")
	if hasFloor {
		fmt.Fprintf(w, " ÷ floor |")
	}
	fmt.Fprintf(w, " B/op | allocs/op |")
	for _, u := range extra {
		fmt.Fprintf(w, " %s |", u)
	}
	fmt.Fprintf(w, " runs |\n|---|---:|---:|")
	if hasFloor {
		fmt.Fprintf(w, "---:|")
	}
	fmt.Fprintf(w, "---:|---:|%s---:|\n", strings.Repeat("---:|", len(extra)))
	for _, n := range names {
		_, impl := split(n)
		ns, _ := res.Median(n, "ns/op")
		switch {
		case wl == "BytesPerKey": // its timed loop is empty
			fmt.Fprintf(w, "| %s | – | – |", impl)
			if hasFloor {
				fmt.Fprintf(w, " – |")
			}
		default:
			fmt.Fprintf(w, "| %s | %s | ±%.0f%% |", impl, num(ns), 100*res.spread(n, "ns/op"))
			if hasFloor {
				fmt.Fprintf(w, " %.2f× |", ns/floor)
			}
		}
		bop, _ := res.Median(n, "B/op")
		fmt.Fprintf(w, " %.0f | %s |", bop, allocs(res, n, wl))
		for _, u := range extra {
			if v, ok := res.Median(n, u); ok {
				fmt.Fprintf(w, " %s |", num(v))
			} else {
				fmt.Fprintf(w, " – |")
			}
		}
		fmt.Fprintf(w, " %d |\n", len(res.Runs[n]["ns/op"]))
	}
}

// status says whether res meets t, and by how much it misses.
func (t Target) status(res *Results) string {
	v, ok := res.Median(t.Bench, t.Unit)
	if !ok {
		return "not measured | – "
	}
	limit, what := t.Max, ""
	if t.Than != "" {
		if limit, ok = res.Median(t.Than, t.Unit); !ok {
			return fmt.Sprintf("%s %s | %s not measured", num(v), t.Unit, t.Than)
		}
		what = " (" + strings.TrimPrefix(t.Than, "Benchmark") + ": " + num(limit) + ")"
	}
	measured := num(v) + " " + t.Unit + what
	var misses []string
	met := v <= t.Max
	if t.Than != "" {
		met = v < limit
	}
	if !met {
		misses = append(misses, fmt.Sprintf("by %s %s (+%.0f%%)", num(v-limit), t.Unit, 100*(v-limit)/limit))
	}
	if t.ZeroAllocs {
		a, _ := res.Median(t.Bench, "allocs/op")
		measured += fmt.Sprintf(", %.0f allocs/op", a)
		if a != 0 {
			misses = append(misses, fmt.Sprintf("%.0f allocs/op", a))
		}
	}
	if len(misses) == 0 {
		return measured + " | **met**"
	}
	return measured + " | **missed** " + strings.Join(misses, ", ")
}

// allocs formats a benchmark's median allocs/op; BytesPerKey's timed loop
// is empty, so its allocs mean nothing.
func allocs(res *Results, name, workload string) string {
	a, ok := res.Median(name, "allocs/op")
	if !ok || workload == "BytesPerKey" {
		return "–"
	}
	return strconv.FormatFloat(a, 'f', 0, 64)
}

// num formats a measurement with three significant digits or more.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}
