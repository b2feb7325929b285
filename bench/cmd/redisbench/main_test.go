package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend/redis/redistest"
)

// TestMain lets the test binary serve as the accuracy trial's child
// process, as the program re-executes itself.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-child-accuracy" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRun runs the whole program on tiny durations: every table and the
// accuracy trial across processes, whose Sluice row must admit the limit
// exactly.
func TestRun(t *testing.T) {
	srv := redistest.Start(t)
	out := filepath.Join(t.TempDir(), "redis.md")
	c := config{
		addr: srv.Addr, out: out, duration: 50 * time.Millisecond, rounds: 2,
		callers: []int{1, 8}, workloads: []string{"hot", "keys100k"}, keys: 500,
		libs: []string{"sluice-gcra", "ulule-redis", "floor-rueidis"}, timeout: time.Second,
		accuracy: true, accProcs: 2, accGoroutines: 4, accTries: 10, accLimit: 30,
		accDelay: 500 * time.Millisecond,
	}
	if err := run(c); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	report := string(b)
	for _, want := range []string{
		"## Decisions per second", "| sluice-gcra |", "| floor-rueidis |",
		"## One hot key, 8 callers", "## 500 keys in turn, 1 caller",
		"## Accuracy across processes", "| sluice-gcra | gcra | 30 | 30 | 0 |",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report has no %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "failed") {
		t.Errorf("a run failed:\n%s", report)
	}
}
