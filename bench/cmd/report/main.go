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
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// notesMarker separates the generated tables from the notes kept by hand.
const notesMarker = "<!-- notes: everything below this line is written by hand and kept by cmd/report -->"

func main() {
	log.SetFlags(0)
	if err := run(os.Args[1:]); err != nil {
		log.Fatal(err)
	}
}

// run is the command, given its arguments.
func run(args []string) error {
	flags := flag.NewFlagSet("report", flag.ContinueOnError)
	in := flags.String("in", "out/bench.txt", "raw `go test -bench` output to read; several files may be given, separated by commas, a later file's benchmarks replacing an earlier one's")
	durable := flags.String("durable", "out/durable.txt", "raw output of the durable-state benchmarks, read when the file exists; its benchmarks replace -in's of the same name; empty reads none")
	out := flags.String("out", "RESULTS.md", "markdown file to write; its notes below the marker are kept")
	accuracy := flags.String("accuracy", "out/accuracy.md", "markdown fragment of the accuracy tests, included verbatim when it exists")
	load := flags.String("load", "out/load.md", "markdown fragment of the load test of `sluice serve`, included verbatim when it exists; its load line feeds the latency target")
	plots := flags.String("plots", "plots", "directory the SVG plots are written to, linked from -out relative to its directory; empty writes none")
	format := flags.String("format", "svg", "file format of the plots: "+strings.Join(PlotFormats, ", "))
	command := flags.String("command", "", "the command that produced the results, shown in the report; default: the input's \"command:\" line, else `make bench`'s")
	if err := flags.Parse(args); err != nil {
		return err
	}

	var res *Results
	var sources []string
	date := ""
	for _, path := range strings.Split(*in, ",") {
		r, d, err := readFile(path)
		if err != nil {
			return err
		}
		if res == nil {
			res, date = r, d
		} else {
			res.Merge(r)
		}
		sources = append(sources, path)
	}
	if _, ok := res.Config["date"]; !ok && date != "" {
		res.Config["date"] = date
	}
	if *durable != "" {
		explicit := false
		flags.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "durable" })
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
			return err
		}
	}
	if len(res.Order) == 0 {
		return fmt.Errorf("%s: no benchmark results", strings.Join(sources, ", "))
	}

	opt := Options{Sources: sources, Command: *command, CPUModel: cpuModel(), GoVersion: goVersion()}
	var err error
	if opt.Accuracy, err = readFragment(*accuracy); err != nil {
		return err
	}
	if opt.Load, err = readFragment(*load); err != nil {
		return err
	}
	if *plots != "" {
		rel, err := filepath.Rel(filepath.Dir(*out), *plots)
		if err != nil {
			rel = *plots
		}
		files, err := WritePlots(res, *plots, *format)
		if err != nil {
			return err
		}
		for _, f := range files {
			opt.Plots = append(opt.Plots, Plot{Title: f.Title, Caption: f.Caption, Path: filepath.ToSlash(filepath.Join(rel, f.Path))})
		}
	}

	notes := "## Notes\n\nNone yet.\n"
	if old, err := os.ReadFile(*out); err == nil {
		if _, after, ok := strings.Cut(string(old), notesMarker+"\n"); ok {
			notes = after
		}
	}
	var b strings.Builder
	Write(&b, res, opt)
	b.WriteString("\n" + notesMarker + "\n")
	b.WriteString(notes)
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return nil
}

// Options are what a report shows besides the results.
type Options struct {
	// Sources are the results files read, in order.
	Sources []string
	// Command is the command that produced them; empty means the results'
	// "command:" line, else make bench's.
	Command string
	// CPUModel is the "model name" of this machine's /proc/cpuinfo, empty
	// when unknown.
	CPUModel string
	// GoVersion is `go version` on this machine, used when the results
	// carry no "go:" line.
	GoVersion string
	// Accuracy and Load are the fragments of the accuracy tests and of the
	// load test, nil when absent.
	Accuracy, Load *Fragment
	// Plots are the plots written, linked from the report.
	Plots []Plot
}

// Plot is a plot file and its title.
type Plot struct {
	Title   string
	Caption string
	// Path is relative to the report.
	Path string
}

// Fragment is a markdown file included verbatim.
type Fragment struct {
	Path string
	Text string
}

// readFragment returns the fragment at path, or nil when there is none.
func readFragment(path string) (*Fragment, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &Fragment{Path: path, Text: string(b)}, nil
}

// cpuModel returns the first "model name" of /proc/cpuinfo, or "".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	return parseCPUModel(string(b))
}

// parseCPUModel returns the first "model name" value of a /proc/cpuinfo
// text, or "".
func parseCPUModel(cpuinfo string) string {
	for _, line := range strings.Split(cpuinfo, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// goVersion returns the output of `go version`, or "".
func goVersion() string {
	out, err := exec.Command("go", "version").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
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
	// Order lists benchmark names, without the -GOMAXPROCS suffix (the
	// "gomaxprocs:" line's value when one came before, else any trailing
	// -number), in the order they first appear.
	Order []string
	// Runs maps a name to its values per unit ("ns/op", "B/key", ...), one
	// value per run.
	Runs map[string]map[string][]float64
}

var (
	configLine = regexp.MustCompile(`^([a-z][^\s:]*):\s*(.*)$`)
	procs      = regexp.MustCompile(`-\d+$`)
)

// notLimiters are the benchmarks of the suite that measure no limiter (a
// model of a store's memory layouts), which the report leaves out; their
// figures are quoted in the notes.
var notLimiters = []string{"BenchmarkIndexLayout/"}

// Parse reads `go test -bench` output. Lines that are neither configuration
// nor results (PASS, ok, log output), and the benchmarks of notLimiters, are
// skipped.
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
		name := fields[0]
		if slices.ContainsFunc(notLimiters, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		switch p := res.Config["gomaxprocs"]; {
		case p == "":
			name = procs.ReplaceAllString(name, "")
		case p != "1": // go test adds no suffix at GOMAXPROCS 1
			name = strings.TrimSuffix(name, "-"+p)
		}
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

// MinCIRuns is the fewest runs giving a 95% confidence interval of the
// median (as benchstat computes it: 1 - 2·P(Binomial(n, ½) < 1) ≥ 0.95
// needs n ≥ 6).
const MinCIRuns = 6

// Spread returns the ±% shown beside a median: with at least MinCIRuns runs,
// the larger half-width of the distribution-free 95% confidence interval of
// the median (the order statistics benchstat uses), as a fraction of the
// median, and ci true; with fewer runs, the largest deviation of one run
// from the median, and ci false.
func (r *Results) Spread(name, unit string) (frac float64, ci bool) {
	med, ok := r.Median(name, unit)
	if !ok || med == 0 {
		return 0, false
	}
	s := slices.Clone(r.Runs[name][unit])
	slices.Sort(s)
	lo, hi := s[0], s[len(s)-1]
	if k := ciRank(len(s), 0.95); k > 0 {
		lo, hi, ci = s[k-1], s[len(s)-k], true
	}
	return max(med-lo, hi-med) / math.Abs(med), ci
}

// ciRank returns the largest k ≥ 1 such that the k-th smallest and k-th
// largest of n samples bound their median with at least the given
// confidence, or 0 when even the extremes do not.
func ciRank(n int, confidence float64) int {
	best := 0
	cdf := 0.0 // P(B ≤ k-1) for B ~ Binomial(n, ½)
	for k := 1; 2*k <= n+1; k++ {
		cdf += math.Exp(lchoose(n, k-1) - float64(n)*math.Ln2)
		if 1-2*cdf < confidence {
			break
		}
		best = k
	}
	return best
}

func lchoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}

// spreadCell formats Spread for a table: "±3%", or "±3%*" when the runs
// are too few for a confidence interval.
func spreadCell(res *Results, name, unit string) string {
	f, ci := res.Spread(name, unit)
	if ci {
		return fmt.Sprintf("±%.0f%%", 100*f)
	}
	return fmt.Sprintf("±%.0f%%*", 100*f)
}

// split returns a benchmark's workload and implementation. The first
// element after "Benchmark" is the workload and the second the
// implementation; further elements name a variant of the workload:
// "BenchmarkHotKey/golimiter" is ("HotKey", "golimiter"),
// "BenchmarkMiddleware/httprate/denied" is ("Middleware/denied",
// "httprate"). The durable workloads keep everything after the first
// element as the implementation ("SyncConcurrency", "pebble/callers-8").
func split(name string) (workload, impl string) {
	parts := strings.Split(strings.TrimPrefix(name, "Benchmark"), "/")
	if len(parts) == 1 {
		return parts[0], ""
	}
	if len(parts) == 2 || isDurable(parts[0]) {
		return parts[0], strings.Join(parts[1:], "/")
	}
	return parts[0] + "/" + strings.Join(parts[2:], "/"), parts[1]
}

// benchName is the inverse of split.
func benchName(workload, impl string) string {
	base, variant, ok := strings.Cut(workload, "/")
	if !ok || isDurable(base) {
		return "Benchmark" + workload + "/" + impl
	}
	return "Benchmark" + base + "/" + impl + "/" + variant
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

// Kind is what an implementation is in a comparison.
type Kind int

// The kinds of implementation, told apart by name.
const (
	KindPeer   Kind = iota // another library
	KindSluice             // "sluice" or "sluice-…"
	KindFloor              // "floor" or "floor-…": the least a limiter could cost
	KindModel              // one of models: another limiter's behaviour, modelled
)

// models are the implementations that model how another limiter behaves
// in a scenario rather than measure a library: TPMScenario's
// checkthencount counts tokens as a limiter that checks before it counts
// would. Their figures (tokens admitted, not time) are shown beside
// Sluice's, never taken for a peer's.
var models = []string{"checkthencount"}

// kindOf tells an implementation's kind from its name.
func kindOf(impl string) Kind {
	switch {
	case impl == "sluice" || strings.HasPrefix(impl, "sluice-"):
		return KindSluice
	case impl == "floor" || strings.HasPrefix(impl, "floor-"):
		return KindFloor
	case slices.Contains(models, impl):
		return KindModel
	}
	return KindPeer
}

// String labels a kind in a table: **Sluice**, floor, model or peer.
func (k Kind) String() string {
	switch k {
	case KindSluice:
		return "**Sluice**"
	case KindFloor:
		return "floor"
	case KindModel:
		return "model"
	}
	return "peer"
}

// unitOf returns the metric a workload is compared by: B/key when its
// benchmarks report it (their timed loop is then empty), else ns/op.
func (r *Results) unitOf(names []string) string {
	for _, n := range names {
		if _, ok := r.Runs[n]["B/key"]; ok {
			return "B/key"
		}
	}
	return "ns/op"
}

// fastestPeer returns, among names, the peer with the smallest median of
// unit.
// A workload without a Sluice implementation measures a part of Sluice
// alone (Step measures algo.Step): it has no peers.
func (r *Results) fastestPeer(names []string, unit string) (impl string, v float64, ok bool) {
	if !hasSluice(names) {
		return "", 0, false
	}
	for _, n := range names {
		_, im := split(n)
		if kindOf(im) != KindPeer {
			continue
		}
		if m, found := r.Median(n, unit); found && (!ok || m < v) {
			impl, v, ok = im, m, true
		}
	}
	return impl, v, ok
}

// hasSluice says whether one of names is a Sluice implementation.
func hasSluice(names []string) bool {
	return slices.ContainsFunc(names, func(n string) bool { _, im := split(n); return kindOf(im) == KindSluice })
}

// floorOf returns the first floor implementation among names and its
// median of unit.
func (r *Results) floorOf(names []string, unit string) (impl string, v float64, ok bool) {
	for _, n := range names {
		if _, im := split(n); kindOf(im) == KindFloor {
			if v, ok = r.Median(n, unit); ok {
				return im, v, true
			}
		}
	}
	return "", 0, false
}

// Write writes the generated part of RESULTS.md for res.
func Write(w io.Writer, res *Results, opt Options) {
	c := res.Config
	runs := 0
	for _, units := range res.Runs {
		for _, vs := range units {
			runs = max(runs, len(vs))
		}
	}
	order, names := res.workloads()
	durable := slices.ContainsFunc(order, isDurable)
	fmt.Fprintf(w, "# Benchmark results\n\n")
	fmt.Fprintf(w, "Generated by `go run ./cmd/report` from `%s` (`make bench`, then `make bench-report`): ", strings.Join(opt.Sources, "` and `"))
	fmt.Fprintf(w, "up to %d runs of each benchmark, medians shown. ", runs)
	fmt.Fprintf(w, "Medians and spreads are computed by cmd/report itself (golang.org/x/perf is not a dependency of this module): ")
	fmt.Fprintf(w, "*±* is the half-width of the 95%% confidence interval of the median, from the order statistics as benchstat takes them, ")
	fmt.Fprintf(w, "as a percentage of the median; where a benchmark has fewer than %d runs no such interval exists and *±…\\** is the largest deviation of one run from the median instead. ", MinCIRuns)
	if durable {
		fmt.Fprintf(w, "Benchmarks and workloads are described in `doc.go`, `bench_test.go`, `middleware_test.go` and `durable_test.go`.\n\n")
	} else {
		fmt.Fprintf(w, "Benchmarks and workloads are described in `doc.go`, `bench_test.go` and `middleware_test.go`.\n\n")
	}
	writeMachine(w, c, opt, runs)

	fmt.Fprintf(w, "\n## Targets\n\n")
	fmt.Fprintf(w, "Computed from the medians above; a margin is relative to the bound (\"missed by 18%%\": 18%% above it).\n\n")
	for _, t := range PeerTargets(res, opt.Load) {
		fmt.Fprintf(w, "- %s\n", t)
	}
	fmt.Fprintf(w, "\nAbsolute targets of the design:\n\n")
	for _, t := range Targets {
		fmt.Fprintf(w, "- %s\n", t.Check(res))
	}

	if len(opt.Plots) > 0 {
		fmt.Fprintf(w, "\n## Plots\n\n")
		for _, p := range opt.Plots {
			fmt.Fprintf(w, "- [%s](%s)\n", p.Title, p.Path)
		}
		for _, p := range opt.Plots {
			fmt.Fprintf(w, "\n![%s](%s)\n", p.Title, p.Path)
			if p.Caption != "" {
				fmt.Fprintf(w, "\n%s\n", p.Caption)
			}
		}
	}

	fmt.Fprintf(w, "\n## Sluice against the fastest peer\n\n")
	fmt.Fprintf(w, "A peer is any implementation not named `sluice…` or `floor…` that is not a model (TPMScenario's `checkthencount`). Each Sluice median divided by the fastest peer's in the same workload: below 1 Sluice is faster (smaller). ")
	fmt.Fprintf(w, "The metric is ns/op, and B/key for BytesPerKey.\n\n")
	fmt.Fprintf(w, "| workload | metric | fastest peer | Sluice | median | ÷ peer | allocs/op |\n")
	fmt.Fprintf(w, "| --- | --- | --- | --- | ---: | ---: | ---: |\n")
	for _, wl := range order {
		if isDurable(wl) {
			continue
		}
		unit := res.unitOf(names[wl])
		peer, pv, ok := res.fastestPeer(names[wl], unit)
		if !ok {
			continue
		}
		for _, n := range names[wl] {
			_, impl := split(n)
			if !slices.Contains(headline, impl) {
				continue
			}
			v, ok := res.Median(n, unit)
			if !ok {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s %s | %s | %s | %.2f× | %s |\n", wl, unit, peer, num(pv), impl, num(v), v/pv, allocs(res, n, unit))
		}
	}

	writeBest(w, res, names)

	fmt.Fprintf(w, "\n## Medians\n\n")
	fmt.Fprintf(w, "*kind*: **Sluice** rows are this library, *floor* rows the least a limiter could cost (a striped map doing get-modify-put, or the bare handler), *model* rows another limiter's behaviour modelled in a scenario (TPMScenario's check-then-count, compared by tokens admitted), *peer* rows other libraries. ")
	fmt.Fprintf(w, "*÷ fastest peer* divides by the fastest peer's median in the same workload, *÷ floor* by the (first) floor's, and *− floor* subtracts it: a middleware's overhead over the bare handler.\n")
	for _, wl := range order {
		if !isDurable(wl) {
			writeMedians(w, res, "###", wl, names[wl])
		}
	}
	writeFragment(w, "Accuracy", opt.Accuracy)
	writeFragment(w, "Load test of `sluice serve`", opt.Load)
	if durable {
		writeDurable(w, res, order, names)
	}
	writeUnmeasurable(w)
}

// writeBest writes, for each of PeerWorkloads that ran, the best Sluice
// row of any variant and the best default row against the fastest peer.
func writeBest(w io.Writer, res *Results, names map[string][]string) {
	var rows []string
	for _, wl := range PeerWorkloads {
		im, v, ok := res.bestSluice(names[wl], false)
		if !ok {
			continue
		}
		peer, pv, ok := res.fastestPeer(names[wl], "ns/op")
		if !ok {
			continue
		}
		def, dcell := "–", "–"
		if dim, dv, ok := res.bestSluice(names[wl], true); ok {
			def, dcell = fmt.Sprintf("%s %s", dim, num(dv)), fmt.Sprintf("%.2f×", dv/pv)
		}
		rows = append(rows, fmt.Sprintf("| %s | %s %s | %s | %s %s | %.2f× | %s | %s |",
			wl, im, num(v), Variant(im), peer, num(pv), v/pv, def, dcell))
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Best Sluice against the fastest peer\n\n")
	fmt.Fprintf(w, "The fastest Sluice row of any variant (`+coarse`: the coarse clock, decisions resolving to its 1ms tick; `+key`: keys prepared with `Limit.Key`, decided by `ApplyKeyInto`; see `doc.go`), ")
	fmt.Fprintf(w, "and of the defaults (`Apply`, the system clock), each divided by the fastest peer's median ns/op in the same workload. Target: ≤ %s× on every workload.\n\n", trim(MaxBestRatio))
	fmt.Fprintf(w, "| workload | best Sluice, ns/op | variant | fastest peer, ns/op | ratio | best default, ns/op | default ratio |\n")
	fmt.Fprintf(w, "| --- | --- | --- | --- | ---: | --- | ---: |\n")
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
}

// headline are the Sluice implementations the fastest-peer table shows.
var headline = []string{"sluice", "sluice-token_bucket", "sluice-gcra"}

// writeFragment includes f verbatim as a section: under its own heading
// when it starts with one, else under title.
func writeFragment(w io.Writer, title string, f *Fragment) {
	if f == nil {
		return
	}
	text := withNewline(f.Text)
	if strings.HasPrefix(text, "#") {
		fmt.Fprintf(w, "\n<!-- included verbatim from %s -->\n%s", f.Path, text)
		return
	}
	fmt.Fprintf(w, "\n## %s\n\nIncluded verbatim from `%s`.\n\n%s", title, f.Path, text)
}

func withNewline(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}

// DefaultCommand is make bench's command with its default COUNT and
// BENCHTIME, shown when the results do not say how they were made.
const DefaultCommand = "cd bench && go test -run '^$' -bench . -benchmem -count 6 -benchtime 500ms -timeout 60m ./... | tee out/bench.txt"

// writeMachine writes the table of the machine and the run.
func writeMachine(w io.Writer, c map[string]string, opt Options, runs int) {
	fmt.Fprintf(w, "| machine and run | |\n| --- | --- |\n")
	rows := [][2]string{{"date", c["date"]}}
	if d, ok := c[durableDateKey]; ok {
		rows = append(rows, [2]string{"date, durable state", d})
	}
	goVer := c["go"]
	if goVer == "" && opt.GoVersion != "" {
		goVer = opt.GoVersion + " (`go version` where the report was made)"
	}
	cpu := c["cpu"]
	switch {
	case cpu == "":
		cpu = opt.CPUModel
	case opt.CPUModel != "" && opt.CPUModel != cpu:
		cpu += " (the report's machine: " + opt.CPUModel + ")"
	}
	command := opt.Command
	if command == "" {
		command = c["command"]
	}
	if command == "" {
		command = DefaultCommand + " (make bench with its defaults; the results do not record their command)"
	}
	for _, row := range append(rows, [][2]string{
		{"go", goVer},
		{"os/arch", c["goos"] + "/" + c["goarch"]},
		{"cpu", cpu},
		{"cores", c["cores"]},
		{"GOMAXPROCS", c["gomaxprocs"]},
		{"command", "`" + strings.ReplaceAll(command, "|", "\\|") + "`"},
		{"runs", strconv.Itoa(runs) + " at most per benchmark"},
	}...) {
		if row[1] == "" || row[1] == "/" {
			row[1] = "unknown"
		}
		fmt.Fprintf(w, "| %s | %s |\n", row[0], row[1])
	}
}

// writeMedians writes the table of medians of workload wl, whose benchmarks
// are names, under a heading of the given level.
func writeMedians(w io.Writer, res *Results, heading, wl string, names []string) {
	fmt.Fprintf(w, "\n%s %s\n\n", heading, wl)
	var extra []string // custom metrics
	for _, n := range names {
		for u := range res.Runs[n] {
			if !slices.Contains([]string{"ns/op", "B/op", "allocs/op"}, u) && !slices.Contains(extra, u) {
				extra = append(extra, u)
			}
		}
	}
	slices.Sort(extra)
	unit := res.unitOf(names)
	peer, peerV, hasPeer := res.fastestPeer(names, unit)
	_, floorV, hasFloor := res.floorOf(names, unit)
	comparing := hasSluice(names)
	if hasPeer {
		fmt.Fprintf(w, "Fastest peer: %s (%s %s).\n\n", peer, num(peerV), unit)
	}
	fmt.Fprintf(w, "| impl |")
	if comparing {
		fmt.Fprintf(w, " kind |")
	}
	fmt.Fprintf(w, " ns/op | ± |")
	if hasPeer {
		fmt.Fprintf(w, " ÷ fastest peer |")
	}
	if hasFloor {
		fmt.Fprintf(w, " ÷ floor |")
	}
	overhead := hasFloor && unit == "ns/op"
	if overhead {
		fmt.Fprintf(w, " − floor, ns |")
	}
	fmt.Fprintf(w, " B/op | allocs/op |")
	for _, u := range extra {
		fmt.Fprintf(w, " %s |", u)
	}
	fmt.Fprintf(w, " runs |\n|---|")
	if comparing {
		fmt.Fprintf(w, "---|")
	}
	cols := 4 + len(extra) + 1
	if hasPeer {
		cols++
	}
	if hasFloor {
		cols++
	}
	if overhead {
		cols++
	}
	fmt.Fprintf(w, "%s\n", strings.Repeat("---:|", cols))
	for _, n := range names {
		_, impl := split(n)
		fmt.Fprintf(w, "| %s |", impl)
		if comparing {
			fmt.Fprintf(w, " %s |", kindOf(impl))
		}
		if unit == "ns/op" {
			ns, _ := res.Median(n, "ns/op")
			fmt.Fprintf(w, " %s | %s |", num(ns), spreadCell(res, n, "ns/op"))
		} else { // the timed loop is empty: ns/op means nothing
			fmt.Fprintf(w, " – | – |")
		}
		v, _ := res.Median(n, unit)
		if hasPeer {
			fmt.Fprintf(w, " %.2f× |", v/peerV)
		}
		if hasFloor {
			fmt.Fprintf(w, " %.2f× |", v/floorV)
		}
		if overhead {
			fmt.Fprintf(w, " %s |", num(v-floorV))
		}
		bop, _ := res.Median(n, "B/op")
		fmt.Fprintf(w, " %.0f | %s |", bop, allocs(res, n, unit))
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

// allocs formats a benchmark's median allocs/op; when a workload is
// compared by another metric than ns/op its timed loop is empty, so its
// allocs mean nothing.
func allocs(res *Results, name, unit string) string {
	a, ok := res.Median(name, "allocs/op")
	if !ok || unit != "ns/op" {
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
