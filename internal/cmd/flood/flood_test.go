package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// floodBin is the flood command the tests share, built once per run of
// the package (one link, not one per test) and removed by TestMain.
var floodBin struct {
	once sync.Once
	dir  string // the temporary directory holding it
	path string
	skip string // why it cannot be built here
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if floodBin.dir != "" {
		os.RemoveAll(floodBin.dir)
	}
	os.Exit(code)
}

// buildFlood returns the path of the flood command, building it on first
// use without the race detector, so that the resident set it measures is
// its own.
func buildFlood(t *testing.T) string {
	t.Helper()
	floodBin.once.Do(func() {
		// make test builds it once, as here, into bin/test, where a
		// build that is up to date skips the link (see the Makefile's
		// test-bins).
		if path := os.Getenv("FLOOD_TEST_BINARY"); path != "" {
			floodBin.path = path
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			floodBin.skip = "no go command on PATH to build the flood command with"
			return
		}
		if floodBin.dir, floodBin.err = os.MkdirTemp("", "flood-test-bin-"); floodBin.err != nil {
			return
		}
		bin := filepath.Join(floodBin.dir, "flood")
		if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
			floodBin.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		floodBin.path = bin
	})
	if floodBin.skip != "" {
		t.Skip(floodBin.skip)
	}
	if floodBin.err != nil {
		t.Fatal(floodBin.err)
	}
	return floodBin.path
}

// runFlood runs the flood binary with args and returns its exit status,
// stdout and stderr.
func runFlood(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("flood %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}

// Floods of a few hundred thousand keys with a 200ms TTL, through the memory
// backend, through Pebble, and into a memory store capped by MaxKeys, stay
// within every bound the command checks: live keys within the keys sent in
// the last TTL plus two sweep periods, RSS within the live keys' bytes, disk
// within the records written in its window, every flood key swept from
// memory and disk afterwards, the victim never given its budget back, and
// the capped store refusing new keys with ErrFull.
func TestFloodStaysBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command and floods it with keys for a few seconds")
	}
	bin := buildFlood(t)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"memory", []string{"-keys", "300000", "-backend", "memory", "-sweep-interval", "50ms"},
			[]string{"| memory | 300000 |", "stored 300000, refused (ErrFull) 0, evicted by sweeping 300000"}},
		{"pebble", []string{"-keys", "100000", "-backend", "pebble", "-dir", filepath.Join(t.TempDir(), "pebble"), "-pebble-sweep", "200ms"},
			[]string{"| pebble | 100000 |", "flood records left on disk 0", "evicted by sweeping 100000"}},
		{"memory-maxkeys", []string{"-keys", "300000", "-backend", "memory", "-maxkeys", "5000"},
			[]string{"| memory maxkeys=5000 | 300000 |"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-ttl", "200ms", "-sample", "200ms"}, tc.args...)
			code, stdout, stderr := runFlood(t, bin, args...)
			if code != 0 {
				t.Fatalf("flood %s: exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout, stderr)
			}
			want := append([]string{"flood: ok, every bound held", "TTL 200ms"}, tc.want...)
			for _, w := range want {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			// The final live count is the victim alone.
			if !strings.Contains(stdout, " | 1 | ") {
				t.Errorf("final live keys are not 1 (the victim):\n%s", stdout)
			}
			t.Logf("\n%s", stdout)
		})
	}
}

// A memory sweeper too slow for the flood (one shard, one key per 50ms)
// lets expired keys pile up: the command must say so and exit 1, naming the
// live-key bound, the sweeper's capacity and the keys left unswept.
func TestFloodReportsAnUnsweptStore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	bin := buildFlood(t)
	// The memory store's sweeper turned off, the bounds still those of one
	// running every 50ms: keys pile up, and the checks must say so.
	code, stdout, stderr := runFlood(t, bin, "-keys", "20000", "-backend", "memory", "-ttl", "50ms",
		"-no-sweeper", "-sweep-interval", "50ms", "-settle", "500ms", "-sample", "100ms")
	if code != 1 {
		t.Fatalf("exit status %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, w := range []string{
		"flood: FAIL: live keys:",
		"flood: FAIL: expired keys not swept from memory",
	} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	if strings.Contains(stdout, "every bound held") {
		t.Errorf("stdout claims success:\n%s", stdout)
	}
}

// The flood's own code under the race detector: a small flood in this
// process, through the memory backend and into a capped store, within its
// live-key bound, swept clean, the victim untouched. (The resident set is
// not checked here: the race detector's shadow memory is not the store's.)
func TestFloodInProcess(t *testing.T) {
	for _, maxKeys := range []int{0, 2000} {
		cfg := config{keys: 20000, backend: "memory", ttl: 100 * time.Millisecond, algorithm: "gcra",
			workers: 2, sample: 100 * time.Millisecond, sweepInterval: 20 * time.Millisecond, maxKeys: maxKeys, slack: 1.5}
		r, err := run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var fails []string
		for _, f := range r.check() {
			if !strings.HasPrefix(f, "peak RSS") {
				fails = append(fails, f)
			}
		}
		if len(fails) > 0 {
			t.Errorf("maxkeys %d: %s", maxKeys, strings.Join(fails, "\n"))
		}
		if r.finalLive != 1 || r.sent != 20000 || (maxKeys > 0) != (r.refused > 0) {
			t.Errorf("maxkeys %d: final live %d (want 1), sent %d (want 20000), refused %d", maxKeys, r.finalLive, r.sent, r.refused)
		}
		if b := r.bounds(); b.peak > b.live || r.peakLive == 0 {
			t.Errorf("maxkeys %d: live keys %d over bound %d (peak %d)", maxKeys, b.peak, b.live, r.peakLive)
		}
	}
}

// Bad flags are refused with exit status 2 and a message naming the flag.
func TestFloodFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-keys", "0"}, "-keys: want a positive number"},
		{[]string{"-backend", "redis"}, `-backend "redis": want memory or pebble`},
		{[]string{"-backend", "memory", "-dir", "x"}, "-dir: the memory backend keeps nothing on disk"},
		{[]string{"-backend", "pebble", "-maxkeys", "10"}, "-maxkeys: only the memory backend"},
		{[]string{"-ttl", "0s"}, "-ttl: want a positive duration"},
		{[]string{"-stripes", "3"}, "-stripes: want zero (the default) or a power of two"},
		{[]string{"-slack", "0.5"}, "-slack: want at least 1"},
		{[]string{"-backend", "pebble", "-sweep-batch", "10"}, "use -stripes"},
		{[]string{"-workers", "0"}, "-workers: want at least one"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-keys", "ten"}, `invalid value "ten" for flag -keys`},
	} {
		var stdout, stderr bytes.Buffer
		if got := runMain(tc.args, &stdout, &stderr); got != 2 {
			t.Errorf("flood %s: exit status %d, want 2", strings.Join(tc.args, " "), got)
		}
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("flood %s: stderr %q lacks %q", strings.Join(tc.args, " "), stderr.String(), tc.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if got := runMain([]string{"-algorithm", "nope", "-keys", "10"}, &stdout, &stderr); got != 1 || !strings.Contains(stderr.String(), "-algorithm") {
		t.Errorf("unknown algorithm: exit %d, stderr %q; want 1 and a message naming -algorithm", got, stderr.String())
	}
}
