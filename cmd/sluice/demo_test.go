package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wantDemo is the demo's output: the reference design's figures, plus the
// sixth algorithm, GCRA, and the key its burst leaves behind.
const wantDemo = `--- 7 POST /api/orders from user u-1, limit 5 per minute ---
  allowed 5, denied 2, last body: rate limit exceeded for rule orders-write
  429 headers: X-RateLimit-Limit: 5, X-RateLimit-Remaining: 0, Retry-After: 12
--- the same user on a different route uses a different budget ---
  cost=5 against a limit of 10: 200, 200, then 429
--- an anonymous request falls through to the IP rule ---
  GET /health -> 200, X-RateLimit-Limit: 100, X-RateLimit-Remaining: 99
--- limit 5 per second, 7 requests arrive together at t=0 ---
  token bucket    : 5 allowed, 2 denied, Retry-After 0.20 s
  leaky bucket    : 5 allowed, 2 denied, Retry-After 0.20 s
  fixed window    : 5 allowed, 2 denied, Retry-After 1.00 s
  sliding log     : 5 allowed, 2 denied, Retry-After 1.00 s
  sliding counter : 5 allowed, 2 denied, Retry-After 1.20 s
  gcra            : 5 allowed, 2 denied, Retry-After 0.20 s
--- boundary burst: 5 requests at t+0.9 s, 5 more at t+1.0 s ---
  fixed window    : 5 allowed, then 5 more within 0.1 s
  sliding counter : 5 allowed, then 0 more within 0.1 s
--- housekeeping ---
  keys held: 11, evicted after 10 min idle: 11
  catch-all: 1 allowed / 0 denied, orders-write: 5 allowed / 2 denied, search: 2 allowed / 1 denied
`

func TestDemo(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCmd(t, "", "demo", "--backend", "memory")
	if code != 0 {
		t.Fatalf("demo = exit %d, want 0; stderr:\n%s", code, stderr)
	}
	got, want := strings.Split(stdout, "\n"), strings.Split(wantDemo, "\n")
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("line %d:\n got %q\nwant %q", i+1, g, w)
		}
	}
}

func TestDemoOut(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "demo.txt")
	code, stdout, stderr := runCmd(t, "", "demo", "--backend", "memory", "--out", path)
	if code != 0 || stdout != "" {
		t.Fatalf("demo --out = exit %d, stdout %q, want 0 and nothing; stderr:\n%s", code, stdout, stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != wantDemo {
		t.Errorf("demo --out wrote:\n%s\nwant:\n%s", b, wantDemo)
	}
}

// TestDemoBudgetSurvivesARestart runs the demo on each durable backend, then
// again with --resume on the same directory: the second run is still denied,
// with the Retry-After the first run's spending leaves.
func TestDemoBudgetSurvivesARestart(t *testing.T) {
	for _, name := range []string{"pebble", "bolt"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "state")
			code, stdout, stderr := runCmd(t, "", "demo", "--backend", name, "--dir", dir)
			if code != 0 {
				t.Fatalf("demo = exit %d; stderr:\n%s", code, stderr)
			}
			wantFirst := wantDemo + "--- budgets live in " + name + " under " + dir + " ---\n" +
				"  POST /api/orders from user u-2: allowed 5, denied 2, Retry-After 12; this process now exits\n"
			if stdout != wantFirst {
				t.Fatalf("first run printed:\n%s\nwant:\n%s", stdout, wantFirst)
			}
			code, stdout, stderr = runCmd(t, "", "demo", "--backend", name, "--dir", dir, "--resume")
			if code != 0 {
				t.Fatalf("demo --resume = exit %d; stderr:\n%s", code, stderr)
			}
			want := "--- a new process on the same " + name + " directory, 3s later ---\n" +
				"  POST /api/orders from user u-2 -> 429, Retry-After 9: the budget survived the restart\n"
			if stdout != want {
				t.Fatalf("resumed run printed:\n%s\nwant:\n%s", stdout, want)
			}
		})
	}
}
