package replay_test

import (
	"bytes"
	"compress/gzip"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/replay"
	"github.com/sluice-go/sluice/replay/internal/gen"
)

var update = flag.Bool("update", false, "rewrite the generated logs and the golden reports under testdata")

// logStart is the first request's time in every generated log.
var logStart = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// testLogs are the committed logs and the generator options that write
// them.
var testLogs = []struct {
	name string
	gz   bool
	opts gen.Options
}{
	// The front proxy of a site, and a second one over the same hour.
	{"access.log", false, gen.Options{Seed: 1, Lines: 3000, Start: logStart, Rate: 4, Callers: 150, Anomalies: true}},
	{"access-2.log.gz", true, gen.Options{Seed: 2, Lines: 2000, Start: logStart, Rate: 3, Callers: 120, Anomalies: true}},
	// An API's JSON log.
	{"api.jsonl", false, gen.Options{Seed: 3, Lines: 2000, Start: logStart, Rate: 6, Callers: 80, JSON: true, Anomalies: true}},
}

// The committed logs are the generator's output: a change to either shows
// here, and -update writes them again.
func TestTestdataLogs(t *testing.T) {
	for _, l := range testLogs {
		var want bytes.Buffer
		if err := gen.Write(&want, l.opts); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", "logs", l.name)
		if *update {
			data := want.Bytes()
			if l.gz {
				var z bytes.Buffer
				zw := gzip.NewWriter(&z)
				zw.Write(data)
				zw.Close()
				data = z.Bytes()
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatalf("%v (run go test ./replay -update)", err)
		}
		var r io.Reader = f
		if l.gz {
			if r, err = gzip.NewReader(f); err != nil {
				t.Fatal(err)
			}
		}
		got, err := io.ReadAll(r)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%s differs from the generator's output; run go test ./replay -update", path)
		}
	}
}

// goldenCases are replays whose reports are checked in.
var goldenCases = []struct {
	name    string
	config  string
	against string
	logs    []string
	opts    replay.SourceOptions
}{
	{
		name:    "combined",
		config:  "testdata/rules.yaml",
		against: "testdata/rules-relaxed.yaml",
		logs:    []string{"testdata/logs/access.log", "testdata/logs/access-2.log.gz"},
		opts:    replay.SourceOptions{Extra: []replay.Field{replay.FieldXFF, replay.FieldUser}},
	},
	{
		name:   "json",
		config: "testdata/rules-all.yaml",
		logs:   []string{"testdata/logs/api.jsonl"},
	},
}

// runCase replays one case and returns its text report and the HTML
// report's directory.
func runCase(t *testing.T, name, cfgPath, against string, logs []string, opts replay.SourceOptions) (string, string) {
	t.Helper()
	load := func(path string) *replay.Replayer {
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := replay.New(path, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	a := load(cfgPath)
	var b *replay.Replayer
	if against != "" {
		b = load(against)
	}
	var sources []*replay.Source
	for _, l := range logs {
		s, err := replay.Open(l, opts, 5)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		sources = append(sources, s)
	}
	res := replay.Run(sources, a, b, replay.RunOptions{})
	if len(res.BadLines) > 5 {
		res.BadLines = res.BadLines[:5]
	}
	var out strings.Builder
	if err := replay.WriteText(&out, res); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := replay.WriteHTML(dir, res); err != nil {
		t.Fatal(err)
	}
	return out.String(), dir
}

// The reports of the committed logs are the checked-in ones (-update
// rewrites them): the terminal report, and the HTML page with its plots.
func TestGoldenReports(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			text, dir := runCase(t, c.name, c.config, c.against, c.logs, c.opts)
			golden := filepath.Join("testdata", "golden", c.name)
			compare(t, golden+".txt", []byte(text))
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				os.RemoveAll(golden)
			}
			for _, e := range entries {
				got, err := os.ReadFile(filepath.Join(dir, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				compare(t, filepath.Join(golden, e.Name()), got)
			}
			if !*update {
				want, _ := os.ReadDir(golden)
				if len(want) != len(entries) {
					t.Errorf("the report has %d files, %s has %d", len(entries), golden, len(want))
				}
			}
		})
	}
}

// compare checks got against the golden file at path, or writes it with
// -update.
func compare(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./replay -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run go test ./replay -update to accept):\n%s", path, firstDiff(string(want), string(got)))
	}
}

// firstDiff shows the first line where two texts differ.
func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return "line " + itoa(i+1) + ":\n  want: " + w + "\n  got:  " + g
		}
	}
	return ""
}

func itoa(i int) string { return strconv.Itoa(i) }
