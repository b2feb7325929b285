package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// DurableWorkloads are the workloads of durable_test.go, rendered in the
// "Durable state" section instead of with the others.
var DurableWorkloads = []string{
	"DurableHotKey", "DurableKeys100k", "DurableParallel",
	"SyncConcurrency", "RawStore", "RawStoreBatch", "ColdStart",
}

func isDurable(workload string) bool { return slices.Contains(DurableWorkloads, workload) }

// The durable-state targets.
const (
	// MaxIntervalRatio bounds the Interval-mode hot key's ns/op over the
	// memory engine's.
	MaxIntervalRatio = 2.0
	// MinSyncScaling is the least ratio of Sync mode's decisions/s with
	// SyncTopCallers callers to its decisions/s with one.
	MinSyncScaling = 20.0
	// SyncTopCallers is the caller count the scaling target is about.
	SyncTopCallers = 64
	// MaxColdKeys is the most keys the engine may hold in memory after its
	// first decision on a freshly opened store (ColdStart fails beyond it).
	MaxColdKeys = 8
)

// The stores and algorithms the durable workloads run, in report order.
var (
	durableStores = []string{"pebble", "bolt"}
	durableAlgos  = []string{"token_bucket", "gcra"}
	syncCallers   = []int{1, 8, 64}
)

// writeDurable writes the "Durable state" section.
func writeDurable(w io.Writer, res *Results, order []string, names map[string][]string) {
	fmt.Fprintf(w, "\n## Durable state\n\n")
	fmt.Fprintf(w, "Sluice's engine over Pebble and bbolt through its in-memory tier, against the same engine over the memory backend (`memory-*`). ")
	fmt.Fprintf(w, "`interval` is `engine.Interval` (changed records written back every 50 ms, and by the caller once 65,536 await); ")
	fmt.Fprintf(w, "`sync` is `engine.Sync` (each decision returns once its record is fsynced; concurrent callers share one commit). ")
	fmt.Fprintf(w, "Every store is in a real directory on this machine's disk, with its default options, and every engine reads the system clock. ")
	fmt.Fprintf(w, "Workloads are described in `durable_test.go`. Run on their own with ")
	fmt.Fprintf(w, "`cd bench && go test -run '^$' -bench 'Durable|SyncConcurrency|RawStore|ColdStart' -benchmem -count 3 -benchtime 500ms -timeout 30m ./... > out/durable.txt`; ")
	fmt.Fprintf(w, "`make bench` runs them too, and where both files hold a benchmark, `out/durable.txt`'s runs are the ones shown.\n")

	fmt.Fprintf(w, "\n### Durable targets\n\n| target | measured | status |\n| --- | --- | --- |\n")
	for _, store := range durableStores {
		for _, a := range durableAlgos {
			fmt.Fprintf(w, "| Interval hot key within %s× of memory | %s |\n", trim(MaxIntervalRatio), intervalStatus(res, store, a))
		}
	}
	for _, store := range durableStores {
		fmt.Fprintf(w, "| Sync: %d callers ≥ %s× the decisions/s of 1 | %s |\n", SyncTopCallers, trim(MinSyncScaling), syncStatus(res, store))
	}
	for _, store := range durableStores {
		fmt.Fprintf(w, "| Cold start on %s keys: the first decision loads ≤ %d keys into memory | %s |\n",
			coldRecords(res, store), MaxColdKeys, coldStatus(res, store))
	}

	// Durable ÷ memory.
	fmt.Fprintf(w, "\n### Durable engine ÷ memory engine\n\n")
	fmt.Fprintf(w, "ns/op medians; *÷ memory* divides by `memory-<algorithm>` in the same workload.\n\n")
	fmt.Fprintf(w, "| workload | engine | token_bucket | ÷ memory | allocs/op | gcra | ÷ memory | allocs/op |\n")
	fmt.Fprintf(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, wl := range []string{"DurableHotKey", "DurableKeys100k", "DurableParallel"} {
		for _, cfg := range configs(names[wl]) {
			fmt.Fprintf(w, "| %s | %s |", strings.TrimPrefix(wl, "Durable"), cfg)
			for _, a := range durableAlgos {
				n := "Benchmark" + wl + "/" + cfg + "-" + a
				v, ok := res.Median(n, "ns/op")
				m, okm := res.Median("Benchmark"+wl+"/memory-"+a, "ns/op")
				switch {
				case !ok:
					fmt.Fprintf(w, " – | – | – |")
				case !okm:
					fmt.Fprintf(w, " %s | – | %s |", big(v), allocs(res, n, "ns/op"))
				default:
					fmt.Fprintf(w, " %s | %s | %s |", big(v), ratio(v, m, true), allocs(res, n, "ns/op"))
				}
			}
			fmt.Fprintln(w)
		}
	}

	// Sync scaling.
	fmt.Fprintf(w, "\n### Sync mode: group commit\n\n")
	fmt.Fprintf(w, "Decisions per second (median) with n goroutines each deciding on its own 16 keys, every decision fsynced before it returns. ")
	fmt.Fprintf(w, "*per commit* is the mean number of decisions one commit carried with %d callers.\n\n", SyncTopCallers)
	fmt.Fprintf(w, "| store |")
	for _, n := range syncCallers {
		fmt.Fprintf(w, " %d caller%s |", n, plural(n))
	}
	fmt.Fprintf(w, " %d ÷ 1 | per commit | latency at 1 caller |\n| --- |%s ---: | ---: | ---: |\n", SyncTopCallers, strings.Repeat(" ---: |", len(syncCallers)))
	for _, store := range durableStores {
		fmt.Fprintf(w, "| %s |", store)
		for _, n := range syncCallers {
			if v, ok := res.Median(syncName(store, n), "decisions/s"); ok {
				fmt.Fprintf(w, " %s |", grouped(v))
			} else {
				fmt.Fprintf(w, " – |")
			}
		}
		one, ok1 := res.Median(syncName(store, 1), "decisions/s")
		top, okt := res.Median(syncName(store, SyncTopCallers), "decisions/s")
		if ok1 && okt {
			fmt.Fprintf(w, " %.1f× |", top/one)
		} else {
			fmt.Fprintf(w, " – |")
		}
		if v, ok := res.Median(syncName(store, SyncTopCallers), "decisions/commit"); ok {
			fmt.Fprintf(w, " %s |", num(v))
		} else {
			fmt.Fprintf(w, " – |")
		}
		if v, ok := res.Median(syncName(store, 1), "ns/op"); ok {
			fmt.Fprintf(w, " %s |\n", dur(v))
		} else {
			fmt.Fprintf(w, " – |\n")
		}
	}

	// Raw store floor.
	fmt.Fprintf(w, "\n### Raw store floor\n\n")
	fmt.Fprintf(w, "The stores alone, no engine: *Get+Put* reads one of 100,000 records in turn and writes 17 bytes back; ")
	fmt.Fprintf(w, "*batch* writes 1000 such records in one WriteBatch (sync false, as the Interval flush does), per record. ")
	fmt.Fprintf(w, "Pebble's Put is not synced and its WriteBatch always is; bbolt syncs every commit by default; bolt-nosync is bbolt with `NoSync`. ")
	fmt.Fprintf(w, "The last columns set the Interval engine on 100,000 keys (DurableKeys100k, token_bucket) against them.\n\n")
	fmt.Fprintf(w, "| store | Get+Put ns/op | B/op | allocs/op | batch ns/key | allocs per batch | engine Keys100k ns/op | ÷ Get+Put | ÷ batch ns/key |\n")
	fmt.Fprintf(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, n := range union(names["RawStore"], names["RawStoreBatch"]) {
		gp, okGP := res.Median("BenchmarkRawStore/"+n, "ns/op")
		bk, okBK := res.Median("BenchmarkRawStoreBatch/"+n, "ns/key")
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |", n,
			orDash(big(gp), okGP), medInt(res, "BenchmarkRawStore/"+n, "B/op"), medInt(res, "BenchmarkRawStore/"+n, "allocs/op"),
			orDash(num(bk), okBK), medInt(res, "BenchmarkRawStoreBatch/"+n, "allocs/op"))
		e, ok := res.Median("BenchmarkDurableKeys100k/"+n+"-interval-token_bucket", "ns/op")
		switch {
		case !ok:
			fmt.Fprintf(w, " – | – | – |\n")
		default:
			fmt.Fprintf(w, " %s | %s | %s |\n", num(e), ratio(e, gp, okGP), ratio(e, bk, okBK))
		}
	}

	// Cold start.
	fmt.Fprintf(w, "\n### Cold start\n\n")
	fmt.Fprintf(w, "Open a store holding a token-bucket record for each of its keys, `engine.New` (Interval mode), and the first `Apply` on one of those keys: ")
	fmt.Fprintf(w, "*first decision* is that time (ns/op). The decision must see the stored record, and the engine must then hold at most %d keys in memory. ", MaxColdKeys)
	fmt.Fprintf(w, "The store was written once per run of the suite (*setup*) and sits in the OS page cache: this is a process restart, not a cold disk. ")
	fmt.Fprintf(w, "*open* is the store's Open alone, part of the first decision; *close* (the final flush and the store's close) is timed apart. ")
	fmt.Fprintf(w, "Pebble starts every iteration from a copy of the store as setup left it; bbolt's file is reused, each restart changing one record.\n\n")
	fmt.Fprintf(w, "| store | keys on disk | first decision | ± | of which open | keys in memory after | close | B/op | allocs/op | setup |\n")
	fmt.Fprintf(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, n := range names["ColdStart"] {
		_, store := split(n)
		ns, _ := res.Median(n, "ns/op")
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", store, coldRecords(res, store),
			dur(ns), spreadCell(res, n, "ns/op"), durOf(res, n, "ns/open"), medInt(res, n, "keys-in-memory"), durOf(res, n, "ns/close"),
			medInt(res, n, "B/op"), medInt(res, n, "allocs/op"), secondsOf(res, n, "s/setup"))
	}

	fmt.Fprintf(w, "\n### Medians, durable state\n\n")
	fmt.Fprintf(w, "*±* as above.\n")
	for _, wl := range order {
		if isDurable(wl) {
			writeMedians(w, res, "####", wl, names[wl])
		}
	}
}

// intervalStatus is the target row of the Interval hot key of store with
// algorithm a against memory.
func intervalStatus(res *Results, store, a string) string {
	n := "DurableHotKey/" + store + "-interval-" + a
	v, ok := res.Median("Benchmark"+n, "ns/op")
	m, okm := res.Median("BenchmarkDurableHotKey/memory-"+a, "ns/op")
	if !ok || !okm {
		return n + " not measured | –"
	}
	r := v / m
	measured := fmt.Sprintf("%s: %s ns/op ÷ memory-%s %s = %.2f×", n, num(v), a, num(m), r)
	if r <= MaxIntervalRatio {
		return measured + " | **met**"
	}
	return measured + fmt.Sprintf(" | **missed** by %.2f×", r-MaxIntervalRatio)
}

// syncStatus is the target row of Sync mode's scaling on store.
func syncStatus(res *Results, store string) string {
	one, ok1 := res.Median(syncName(store, 1), "decisions/s")
	top, okt := res.Median(syncName(store, SyncTopCallers), "decisions/s")
	if !ok1 || !okt {
		return fmt.Sprintf("SyncConcurrency/%s not measured | –", store)
	}
	r := top / one
	measured := fmt.Sprintf("%s: %s decisions/s with %d callers ÷ %s with 1 = %.1f×", store, grouped(top), SyncTopCallers, grouped(one), r)
	if r >= MinSyncScaling {
		return measured + " | **met**"
	}
	return measured + fmt.Sprintf(" | **missed**: %.0f%% of the %s× asked", 100*r/MinSyncScaling, trim(MinSyncScaling))
}

// coldStatus is the target row of ColdStart on store.
func coldStatus(res *Results, store string) string {
	n := "BenchmarkColdStart/" + store
	ns, ok := res.Median(n, "ns/op")
	if !ok {
		return "ColdStart/" + store + " not measured | –"
	}
	keys := 0.0
	for _, v := range res.Runs[n]["keys-in-memory"] {
		keys = max(keys, v)
	}
	measured := fmt.Sprintf("%s: first decision in %s, at most %s key%s in memory", store, dur(ns), trim(keys), plural(int(keys)))
	if keys <= MaxColdKeys {
		return measured + " | **met**"
	}
	return measured + " | **missed**"
}

// coldRecords returns the number of records ColdStart's store on store
// held, formatted, or "?".
func coldRecords(res *Results, store string) string {
	if v, ok := res.Median("BenchmarkColdStart/"+store, "records"); ok {
		return grouped(v)
	}
	return "1,000,000"
}

func syncName(store string, callers int) string {
	return fmt.Sprintf("BenchmarkSyncConcurrency/%s/callers-%d", store, callers)
}

// configs returns, in order of appearance, the engine configurations of a
// durable workload's benchmarks: the name without "-<algorithm>",
// "memory" first.
func configs(names []string) []string {
	var out []string
	for _, n := range names {
		_, impl := split(n)
		for _, a := range durableAlgos {
			if cfg, ok := strings.CutSuffix(impl, "-"+a); ok && !slices.Contains(out, cfg) {
				out = append(out, cfg)
			}
		}
	}
	if i := slices.Index(out, "memory"); i > 0 {
		out = append([]string{"memory"}, slices.Delete(out, i, i+1)...)
	}
	return out
}

// union returns the implementations of the benchmarks in a and b, in
// order of appearance.
func union(a, b []string) []string {
	var out []string
	for _, n := range append(slices.Clone(a), b...) {
		if _, impl := split(n); !slices.Contains(out, impl) {
			out = append(out, impl)
		}
	}
	return out
}

// medInt formats the median of name's unit rounded to an integer, or "–".
func medInt(res *Results, name, unit string) string {
	v, ok := res.Median(name, unit)
	if !ok {
		return "–"
	}
	return grouped(v)
}

// big formats v with num below 10,000 and with thousands separators from
// there on.
func big(v float64) string {
	if math.Abs(v) < 10_000 {
		return num(v)
	}
	return grouped(v)
}

// durOf formats the median of name's unit, in nanoseconds, as a duration.
func durOf(res *Results, name, unit string) string {
	v, ok := res.Median(name, unit)
	if !ok {
		return "–"
	}
	return dur(v)
}

// secondsOf formats the median of name's unit, in seconds.
func secondsOf(res *Results, name, unit string) string {
	v, ok := res.Median(name, unit)
	if !ok {
		return "–"
	}
	return num(v) + " s"
}

func orDash(s string, ok bool) string {
	if !ok {
		return "–"
	}
	return s
}

// ratio formats a/b, or "–" when b is missing.
func ratio(a, b float64, ok bool) string {
	switch r := a / b; {
	case !ok || b == 0:
		return "–"
	case r >= 100:
		return grouped(r) + "×"
	default:
		return fmt.Sprintf("%.2f×", r)
	}
}

// dur formats a number of nanoseconds with a unit that fits.
func dur(ns float64) string {
	switch a := math.Abs(ns); {
	case a >= 1e9:
		return num(ns/1e9) + " s"
	case a >= 1e6:
		return num(ns/1e6) + " ms"
	case a >= 1e3:
		return num(ns/1e3) + " µs"
	default:
		return num(ns) + " ns"
	}
}

// grouped formats v rounded to an integer with thousands separators.
func grouped(v float64) string {
	s := strconv.FormatFloat(math.Round(math.Abs(v)), 'f', 0, 64)
	var b strings.Builder
	if v < 0 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// trim formats v with as few digits as it needs.
func trim(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
