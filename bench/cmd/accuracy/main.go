// Command accuracy replays bench.BurstyTrace against every algorithm of
// every limiter the benchmarks compare and writes a markdown fragment: a
// heading, how it was measured, and one row per library and algorithm with
// the requests allowed, the ideal, the excess and the most admitted in any
// window.
//
// Limiters that can be told the time are replayed exactly; the others
// (go-limiter, ulule, tollbooth) in real time with the trace's times scaled
// by -scale, which takes the trace's length times the scale (about 3 s at
// the default). Run it from bench/:
//
//	go run ./cmd/accuracy -out out/accuracy.md
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluice-go/sluice/bench"
)

func main() {
	out := flag.String("out", "", "file to write the markdown fragment to (default: standard output)")
	scale := flag.Float64("scale", 0.3, "factor applied to the trace's times for the real-time replay, in (0, 1]; 0 skips it")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "accuracy: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if err := run(*out, *scale); err != nil {
		fmt.Fprintf(os.Stderr, "accuracy: %v\n", err)
		os.Exit(1)
	}
}

func run(out string, scale float64) error {
	tr := bench.BurstyTrace()
	results, err := bench.ReplayExact(tr)
	if err != nil {
		return err
	}
	if scale != 0 {
		rt, err := bench.ReplayRealTime(tr, scale)
		if err != nil {
			return err
		}
		results = append(results, rt...)
	}
	var buf bytes.Buffer
	if err := bench.WriteAccuracy(&buf, tr, results, scale); err != nil {
		return err
	}
	if out == "" {
		_, err := os.Stdout.Write(buf.Bytes())
		return err
	}
	if dir := filepath.Dir(out); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}
