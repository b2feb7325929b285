package replay_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/replay"
	"github.com/sluice-go/sluice/replay/internal/gen"
)

var (
	benchOnce sync.Once
	benchLog  []byte
)

// benchLines is the size of the benchmark's log.
const benchLines = 1_000_000

// BenchmarkReplay1M replays a generated combined log of a million lines
// (an hour of 20,000 callers at about 280 requests a second, with the
// anomalies) under testdata/rules.yaml: parsing, reordering, deciding,
// and the report with every caller's need. One op is the whole log;
// cpu-s/op is the CPU time it took, which a loaded machine inflates less
// than ns/op.
func BenchmarkReplay1M(b *testing.B) {
	benchOnce.Do(func() {
		var buf bytes.Buffer
		if err := gen.Write(&buf, gen.Options{Seed: 7, Lines: benchLines, Start: logStart, Rate: 280, Callers: 20000, Anomalies: true}); err != nil {
			b.Fatal(err)
		}
		benchLog = buf.Bytes()
	})
	cfg, err := config.Load("testdata/rules.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(benchLog)))
	var cpu float64
	for b.Loop() {
		cpu0 := cpuSeconds()
		r, err := replay.New("rules.yaml", cfg)
		if err != nil {
			b.Fatal(err)
		}
		src, err := replay.NewSource("bench.log", bytes.NewReader(benchLog), replay.SourceOptions{
			Format: replay.FormatCombined, Extra: []replay.Field{replay.FieldXFF, replay.FieldUser},
		}, 5)
		if err != nil {
			b.Fatal(err)
		}
		res := replay.Run([]*replay.Source{src}, r, nil, replay.RunOptions{})
		if res.Files[0].Lines != benchLines {
			b.Fatalf("read %d lines, want %d", res.Files[0].Lines, benchLines)
		}
		r.Close()
		cpu += cpuSeconds() - cpu0
	}
	b.ReportMetric(float64(benchLines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
	// The process's CPU time per op (the collector's included): what the
	// replay costs whatever else the machine runs.
	b.ReportMetric(cpu/float64(b.N), "cpu-s/op")
}
