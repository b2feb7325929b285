// Command quick checks, in about four minutes, where Sluice stands against
// the two fastest peers on the six memory workloads of the suite (HotKey,
// HotKeyDenied, Keys100k, Keys100kDenied, Parallel10k, Parallel10kDenied)
// and on the 100,000 keys in a random order (Keys100kShuffled,
// Keys100kShuffledDenied), on the machine it runs on. It builds the suite's test binary once, runs
// those benchmarks for Sluice's default rows and its opt-in variants (see
// bench's doc.go: +coarse, +key, +coarse+key) and for go-limiter and
// x/time/rate in interleaved rounds of one run each, so that a burst of
// load elsewhere on the machine falls on every implementation alike, and
// prints the medians as a table: per workload, the best Sluice row and its
// variant, the fastest peer, their ratio, and the same ratio for the best
// default row (engine.Apply with the system clock). Each ratio is also
// given paired: the median of the ratios of the two rows within each
// round, which a machine whose speed drifts between rounds moves less.
//
// Usage, from bench/ (or `make bench-quick` from the repository's root):
//
//	go run ./cmd/quick [-rounds 5] [-benchtime 250ms] [-raw out/quick.txt]
//
// With -scaling it runs Parallel10k and Parallel10kDenied at -cpu 1,2,4,8
// instead (-cpus changes the list) and prints each implementation's ns/op
// per GOMAXPROCS and its speedup over one. On a machine with fewer cores
// than a GOMAXPROCS, that column is oversubscribed: goroutines then take
// turns on a core, and what it shows is the cost of the cache lines they
// share, not more throughput.
//
// Medians of a handful of rounds on a busy machine move by several
// percent; read the ratios, run it twice, and prefer a quiet machine. The
// load average at the start and the end is printed beside the table.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice/bench"
)

// Workloads are the memory workloads the table covers, in its order.
var Workloads = bench.MemoryWorkloads

// Peers are the two fastest peers of the full suite on those workloads.
var Peers = []string{"golimiter", "xtimerate"}

// DefaultImpls matches the Sluice rows run: both default rows, every
// variant of GCRA and the token bucket's fastest.
const DefaultImpls = `sluice-gcra|sluice-token_bucket|sluice-gcra\+coarse|sluice-gcra\+key|sluice-gcra\+coarse\+key|sluice-token_bucket\+coarse\+key`

func main() {
	log.SetFlags(0)
	if err := run(os.Args[1:], os.Stdout); err != nil {
		log.Fatal("quick: ", err)
	}
}

func run(args []string, stdout io.Writer) error {
	flags := flag.NewFlagSet("quick", flag.ContinueOnError)
	rounds := flags.Int("rounds", 5, "rounds; each runs every benchmark once, and the table shows the median of the rounds")
	benchtime := flags.String("benchtime", "250ms", "-test.benchtime of each run")
	impls := flags.String("impls", DefaultImpls, "regexp of the Sluice rows to run (the peers always run)")
	scaling := flags.Bool("scaling", false, "run Parallel10k and Parallel10kDenied at each of -cpus instead, and print the scaling table")
	cpus := flags.String("cpus", "1,2,4,8", "GOMAXPROCS values of -scaling, as go test's -cpu")
	raw := flags.String("raw", "", "file to write the benchmarks' raw output to; empty writes none")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *rounds < 1 {
		return fmt.Errorf("-rounds %d: need at least one", *rounds)
	}
	if _, err := regexp.Compile(*impls); err != nil {
		return fmt.Errorf("-impls: %w", err)
	}

	dir, err := os.MkdirTemp("", "sluice-quick-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "bench.test")
	fmt.Fprintf(stdout, "building the benchmarks…\n")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go test -c: %w", err)
	}

	workloads := Workloads
	if *scaling {
		workloads = []string{"Parallel10k", "Parallel10kDenied"}
	}
	pattern := BenchPattern(workloads, *impls)
	targs := []string{"-test.run", "^$", "-test.bench", pattern, "-test.benchtime", *benchtime, "-test.count", "1"}
	if *scaling {
		targs = append(targs, "-test.cpu", *cpus)
	}
	var rawOut io.Writer = io.Discard
	if *raw != "" {
		f, err := os.Create(*raw)
		if err != nil {
			return err
		}
		defer f.Close()
		rawOut = f
	}
	load0 := loadavg()
	start := time.Now()
	res := NewResults()
	for r := 1; r <= *rounds; r++ {
		fmt.Fprintf(stdout, "round %d of %d…\n", r, *rounds)
		cmd := exec.Command(bin, targs...)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		rawOut.Write(out)
		if err != nil {
			os.Stderr.Write(out)
			return fmt.Errorf("round %d: %w", r, err)
		}
		if err := res.Parse(strings.NewReader(string(out))); err != nil {
			return fmt.Errorf("round %d: %w", r, err)
		}
	}
	fmt.Fprintf(stdout, "\n%d rounds of -benchtime %s in %s; load average %s at the start, %s at the end; %s\n\n",
		*rounds, *benchtime, time.Since(start).Round(time.Second), load0, loadavg(), res.Machine())
	if *scaling {
		WriteScaling(stdout, res, workloads)
	} else {
		WriteRatios(stdout, res, workloads)
	}
	return nil
}

// BenchPattern is the -test.bench regexp of workloads for the Sluice rows
// impls matches and the Peers.
func BenchPattern(workloads []string, impls string) string {
	return fmt.Sprintf("^Benchmark(%s)$/^(%s|%s)$", strings.Join(workloads, "|"), impls, strings.Join(Peers, "|"))
}

// loadavg returns the first three fields of /proc/loadavg, or "unknown".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Row identifies one benchmark at one GOMAXPROCS.
type Row struct {
	Workload, Impl string
	Procs          int
}

// Results are the values of every run, by row and unit.
type Results struct {
	Values map[Row]map[string][]float64
	// Config holds the "key: value" lines of the output (cpu, go, cores).
	Config map[string]string
}

// NewResults returns empty Results.
func NewResults() *Results {
	return &Results{Values: map[Row]map[string][]float64{}, Config: map[string]string{}}
}

var (
	configLine = regexp.MustCompile(`^([a-z][^\s:]*):\s*(.*)$`)
	procsTail  = regexp.MustCompile(`-(\d+)$`)
)

// Parse adds the results of `go test -bench` output to r. A name's
// trailing -N is its GOMAXPROCS (go test writes none for 1).
func (r *Results) Parse(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if m := configLine.FindStringSubmatch(text); m != nil {
			if _, ok := r.Config[m[1]]; !ok {
				r.Config[m[1]] = m[2]
			}
			continue
		}
		f := strings.Fields(text)
		if len(f) < 4 || len(f)%2 != 0 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		name, procs := f[0], 1
		if m := procsTail.FindStringSubmatch(name); m != nil {
			procs, _ = strconv.Atoi(m[1])
			name = strings.TrimSuffix(name, m[0])
		}
		wl, impl, ok := strings.Cut(strings.TrimPrefix(name, "Benchmark"), "/")
		if !ok {
			continue
		}
		row := Row{wl, impl, procs}
		units := r.Values[row]
		if units == nil {
			units = map[string][]float64{}
			r.Values[row] = units
		}
		for i := 2; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return fmt.Errorf("line %d: %q is not a number", line, f[i])
			}
			units[f[i+1]] = append(units[f[i+1]], v)
		}
	}
	return sc.Err()
}

// Machine describes the machine from the output's configuration lines.
func (r *Results) Machine() string {
	parts := []string{}
	for _, k := range []string{"cpu", "cores", "go"} {
		if v := r.Config[k]; v != "" {
			parts = append(parts, k+": "+v)
		}
	}
	if len(parts) == 0 {
		return "machine unknown"
	}
	return strings.Join(parts, ", ")
}

// Median returns the median of row's values in unit.
func (r *Results) Median(row Row, unit string) (float64, bool) {
	return median(slices.Clone(r.Values[row][unit]))
}

// median returns the median of vs, which it sorts, and false when vs is
// empty.
func median(vs []float64) (float64, bool) {
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2], true
	}
	return (vs[n/2-1] + vs[n/2]) / 2, true
}

// isSluice reports whether impl is one of Sluice's rows, and isDefault
// whether it is a default one (no "+variant"); a row on a clock that never
// moves is neither.
func isSluice(impl string) bool {
	return strings.HasPrefix(impl, "sluice-") && !strings.HasSuffix(impl, "-fakeclock")
}

func isDefault(impl string) bool { return isSluice(impl) && !strings.Contains(impl, "+") }

// Best returns, in workload wl at procs, the row with the smallest median
// ns/op among the implementations keep accepts.
func (r *Results) Best(wl string, procs int, keep func(string) bool) (impl string, v float64, ok bool) {
	for row := range r.Values {
		if row.Workload != wl || row.Procs != procs || !keep(row.Impl) {
			continue
		}
		if m, found := r.Median(row, "ns/op"); found && (!ok || m < v || m == v && row.Impl < impl) {
			impl, v, ok = row.Impl, m, true
		}
	}
	return impl, v, ok
}

// procsOf returns the GOMAXPROCS values measured in wl, ascending.
func (r *Results) procsOf(wl string) []int {
	var ps []int
	for row := range r.Values {
		if row.Workload == wl && !slices.Contains(ps, row.Procs) {
			ps = append(ps, row.Procs)
		}
	}
	slices.Sort(ps)
	return ps
}

// variant returns the "+…" suffix of a Sluice row, or "default".
func variant(impl string) string {
	if i := strings.IndexByte(impl, '+'); i >= 0 {
		return impl[i:]
	}
	return "default"
}

// WriteRatios writes the ratio table of workloads: best Sluice row, its
// variant, the fastest peer, their ratio, and the best default row's.
func WriteRatios(w io.Writer, r *Results, workloads []string) {
	fmt.Fprintf(w, "| workload | best Sluice, ns/op | variant | fastest peer, ns/op | ratio | paired | default Sluice, ns/op | default ratio | default paired |\n")
	fmt.Fprintf(w, "|---|---|---|---|---:|---:|---|---:|---:|\n")
	var allocating []string
	for _, wl := range workloads {
		if len(r.procsOf(wl)) == 0 {
			fmt.Fprintf(w, "| %s | – | – | – | – | – | – | – | – |\n", wl)
		}
		for _, p := range r.procsOf(wl) {
			label := wl
			if len(r.procsOf(wl)) > 1 {
				label = fmt.Sprintf("%s, GOMAXPROCS %d", wl, p)
			}
			im, v, ok := r.Best(wl, p, isSluice)
			peer, pv, pok := r.Best(wl, p, func(s string) bool { return slices.Contains(Peers, s) })
			if !ok || !pok {
				fmt.Fprintf(w, "| %s | – | – | – | – | – | – | – | – |\n", label)
				continue
			}
			def, dratio, dpaired := "–", "–", "–"
			if dim, dv, ok := r.Best(wl, p, isDefault); ok {
				def, dratio = fmt.Sprintf("%s %s", dim, num(dv)), fmt.Sprintf("%.2f×", dv/pv)
				dpaired = ratioText(r.Paired(Row{wl, dim, p}, Row{wl, peer, p}))
			}
			paired := ratioText(r.Paired(Row{wl, im, p}, Row{wl, peer, p}))
			fmt.Fprintf(w, "| %s | %s %s | %s | %s %s | %.2f× | %s | %s | %s | %s |\n", label, im, num(v), variant(im), peer, num(pv), v/pv, paired, def, dratio, dpaired)
		}
	}
	for row := range r.Values {
		if a, ok := r.Median(row, "allocs/op"); ok && a != 0 && isSluice(row.Impl) {
			allocating = append(allocating, fmt.Sprintf("%s/%s (%s allocs/op)", row.Workload, row.Impl, num(a)))
		}
	}
	slices.Sort(allocating)
	if len(allocating) > 0 {
		fmt.Fprintf(w, "\nSluice rows that allocate: %s\n", strings.Join(allocating, ", "))
	} else {
		fmt.Fprintf(w, "\nEvery Sluice row: 0 allocs/op.\n")
	}
}

// Paired returns the median, over the rounds, of a's ns/op divided by b's
// in the same round: rows run minutes apart on a shared machine see its
// speed change between rounds, rows of one round see it alike, so the
// ratio of each round moves less than the ratio of the medians. It is
// false unless both rows have one value in every round.
func (r *Results) Paired(a, b Row) (float64, bool) {
	av, bv := r.Values[a]["ns/op"], r.Values[b]["ns/op"]
	if len(av) == 0 || len(av) != len(bv) {
		return 0, false
	}
	ratios := make([]float64, len(av))
	for i := range av {
		ratios[i] = av[i] / bv[i]
	}
	return median(ratios)
}

// ratioText formats a ratio as the table does, or "–" when there is none.
func ratioText(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

// WriteScaling writes, per workload, each implementation's median ns/op at
// every GOMAXPROCS measured and its speedup over the first (ns/op at the
// first ÷ ns/op at each: decisions per second gained).
func WriteScaling(w io.Writer, r *Results, workloads []string) {
	for _, wl := range workloads {
		ps := r.procsOf(wl)
		if len(ps) == 0 {
			continue
		}
		var impls []string
		for row := range r.Values {
			if row.Workload == wl && !slices.Contains(impls, row.Impl) {
				impls = append(impls, row.Impl)
			}
		}
		slices.SortFunc(impls, func(a, b string) int {
			if ka, kb := isSluice(a), isSluice(b); ka != kb {
				if ka {
					return -1
				}
				return 1
			}
			return strings.Compare(a, b)
		})
		fmt.Fprintf(w, "%s, ns/op by GOMAXPROCS (speedup over %d):\n\n| impl |", wl, ps[0])
		for _, p := range ps {
			fmt.Fprintf(w, " %d |", p)
		}
		fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---:|", len(ps)))
		for _, im := range impls {
			fmt.Fprintf(w, "| %s |", im)
			base, bok := r.Median(Row{wl, im, ps[0]}, "ns/op")
			for _, p := range ps {
				v, ok := r.Median(Row{wl, im, p}, "ns/op")
				switch {
				case !ok:
					fmt.Fprintf(w, " – |")
				case p == ps[0] || !bok:
					fmt.Fprintf(w, " %s |", num(v))
				default:
					fmt.Fprintf(w, " %s (%.2f×) |", num(v), base/v)
				}
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
	}
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
