package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/backend/redis/redistest"
)

// answer is one line of simulate's output.
type answer struct {
	Allowed    *bool       `json:"allowed"`
	Limit      int64       `json:"limit"`
	Remaining  int64       `json:"remaining"`
	RetryAfter json.Number `json:"retry_after"`
	Delay      json.Number `json:"delay"`
	Reset      json.Number `json:"reset"`
	Key        string      `json:"key"`
	Error      string      `json:"error"`
}

// simulateOK runs simulate with args over trace, requires exit status 0 and
// returns the answers.
func simulateOK(t *testing.T, trace string, args ...string) []answer {
	t.Helper()
	code, stdout, stderr := runCmd(t, trace, append([]string{"simulate"}, args...)...)
	if code != 0 {
		t.Fatalf("simulate %q = exit %d, want 0; stderr:\n%s", args, code, stderr)
	}
	return parseAnswers(t, stdout)
}

func parseAnswers(t *testing.T, stdout string) []answer {
	t.Helper()
	var out []answer
	for i, line := range strings.SplitAfter(stdout, "\n") {
		if line == "" {
			continue
		}
		if !strings.HasSuffix(line, "\n") {
			t.Fatalf("output line %d %q has no newline", i+1, line)
		}
		var a answer
		dec := json.NewDecoder(strings.NewReader(line))
		dec.UseNumber()
		dec.DisallowUnknownFields()
		if err := dec.Decode(&a); err != nil {
			t.Fatalf("output line %d %q: %v", i+1, line, err)
		}
		out = append(out, a)
	}
	return out
}

// lines joins trace lines with newlines.
func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

// repeat returns n copies of line.
func repeat(n int, line string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = line
	}
	return out
}

// The reference design's burst: limit 5 per second, 7 requests together.
func TestSimulateArticleBurst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		algorithm string
		retry     string   // retry_after of the two denials
		delays    []string // delay of the five admitted requests
	}{
		{"token_bucket", "0.2", repeat(5, "0")},
		{"leaky_bucket", "0.2", []string{"0", "0.2", "0.4", "0.6", "0.8"}},
		{"fixed_window", "1", repeat(5, "0")},
		{"sliding_log", "1", repeat(5, "0")},
		{"sliding_counter", "1.2", repeat(5, "0")}, // the article prints 1: see README, deliberate difference
		{"gcra", "0.2", repeat(5, "0")},
	}
	for _, tt := range tests {
		t.Run(tt.algorithm, func(t *testing.T) {
			t.Parallel()
			trace := lines(repeat(7, `{"t": 1700000000, "key": "u-1"}`)...)
			got := simulateOK(t, trace, "--algorithm", tt.algorithm, "--limit", "5", "--window", "1s")
			if len(got) != 7 {
				t.Fatalf("got %d answers, want 7", len(got))
			}
			for i, a := range got {
				wantAllowed := i < 5
				if a.Allowed == nil || *a.Allowed != wantAllowed {
					t.Errorf("step %d: allowed = %v, want %v", i, a.Allowed, wantAllowed)
				}
				if want := int64(max(0, 4-i)); a.Remaining != want {
					t.Errorf("step %d: remaining = %d, want %d", i, a.Remaining, want)
				}
				if a.Limit != 5 || a.Key != "u-1" {
					t.Errorf("step %d: limit, key = %d, %q, want 5, u-1", i, a.Limit, a.Key)
				}
				wantRetry, wantDelay := "0", "0"
				if wantAllowed {
					wantDelay = tt.delays[i]
				} else {
					wantRetry = tt.retry
				}
				if a.RetryAfter.String() != wantRetry || a.Delay.String() != wantDelay {
					t.Errorf("step %d: retry_after, delay = %s, %s, want %s, %s", i, a.RetryAfter, a.Delay, wantRetry, wantDelay)
				}
			}
		})
	}
}

func TestSimulateBurstLimitsTheCapacity(t *testing.T) {
	t.Parallel()
	// limit 60 per minute with a burst of 10: ten at once, then one a second.
	trace := lines(append(repeat(11, `{"t": 100, "key": "k"}`), `{"t": 100.999999999, "key": "k"}`, `{"t": 101, "key": "k"}`)...)
	got := simulateOK(t, trace, "--algorithm", "token_bucket", "--limit", "60", "--window", "1m", "--burst", "10")
	for i, a := range got {
		want := i < 10 || i == 12
		if *a.Allowed != want || a.Limit != 10 {
			t.Errorf("step %d: allowed, limit = %v, %d, want %v, 10", i, *a.Allowed, a.Limit, want)
		}
	}
	if got[10].RetryAfter.String() != "1" || got[11].RetryAfter.String() != "0.000000001" {
		t.Errorf("retry_after = %s, %s, want 1, 0.000000001", got[10].RetryAfter, got[11].RetryAfter)
	}
}

func TestSimulateInvalidCostContinues(t *testing.T) {
	t.Parallel()
	trace := lines(
		`{"t": 10, "key": "a", "cost": 0}`,
		`{"t": 10, "key": "a", "cost": 6}`,
		`{"t": 10, "key": "a", "cost": -3}`,
		`{"t": 10, "key": "a", "cost": 99999999999999999999999}`,
		`{"t": 10, "key": "a", "cost": 5}`,
		`{"t": 10, "key": "a"}`,
	)
	got := simulateOK(t, trace, "--algorithm", "fixed_window", "--limit", "5", "--window", "1s")
	if len(got) != 6 {
		t.Fatalf("got %d answers, want 6", len(got))
	}
	for i, want := range []string{"cost must be positive", "cost exceeds capacity", "cost must be positive", "cost exceeds capacity"} {
		if !strings.Contains(got[i].Error, want) || got[i].Allowed != nil {
			t.Errorf("step %d: answer %+v, want only an error containing %q", i, got[i], want)
		}
	}
	if !*got[4].Allowed || *got[5].Allowed {
		t.Errorf("after the errors: allowed = %v, %v, want true, false (the refused costs spent nothing)", *got[4].Allowed, *got[5].Allowed)
	}
}

func TestSimulateKeysAreIndependent(t *testing.T) {
	t.Parallel()
	trace := lines(
		`{"t": 0, "key": "a"}`,
		`{"t": 0, "key": "b"}`,
		`{"t": 0, "key": "a"}`,
		`{"t": 0, "key": "b"}`,
		`{"t": 0, "key": "a"}`,
		`{"t": 0, "key": "c"}`,
		`{"t": 0, "key": "A"}`,
	)
	got := simulateOK(t, trace, "--algorithm", "sliding_log", "--limit", "2", "--window", "1s")
	want := []bool{true, true, true, true, false, true, true}
	for i, a := range got {
		if *a.Allowed != want[i] {
			t.Errorf("step %d (key %q): allowed = %v, want %v", i, a.Key, *a.Allowed, want[i])
		}
	}
}

// Windows are whole multiples of the window from the Unix epoch, also before
// it.
func TestSimulateWindowsAlignToTheEpoch(t *testing.T) {
	t.Parallel()
	trace := lines(
		`{"t": 6.9, "key": "k"}`,          // window [0, 7)
		`{"t": 6.999, "key": "k"}`,        // same window: denied until 7
		`{"t": 7.0, "key": "k"}`,          // window [7, 14)
		`{"t": 13.5, "key": "k"}`,         // same window
		`{"t": -0.5, "key": "n"}`,         // window [-7, 0)
		`{"t": -7, "key": "n"}`,           // same window
		`{"t": -7.000000001, "key": "m"}`, // window [-14, -7)
		`{"t": -7, "key": "m"}`,           // window [-7, 0)
	)
	got := simulateOK(t, trace, "--algorithm", "fixed_window", "--limit", "1", "--window", "7s")
	if len(got) != 8 {
		t.Fatalf("got %d answers, want 8", len(got))
	}
	want := []struct {
		allowed bool
		retry   string
	}{{true, "0"}, {false, "0.001"}, {true, "0"}, {false, "0.5"}, {true, "0"}, {false, "7"}, {true, "0"}, {true, "0"}}
	for i, a := range got {
		if *a.Allowed != want[i].allowed || a.RetryAfter.String() != want[i].retry {
			t.Errorf("step %d: allowed, retry_after = %v, %s, want %v, %s", i, *a.Allowed, a.RetryAfter, want[i].allowed, want[i].retry)
		}
	}
}

func TestSimulateExactTimes(t *testing.T) {
	t.Parallel()
	// A token bucket of 1 per second: the next token is due exactly one
	// second after the first request, to the nanosecond.
	trace := lines(
		`{"t": 1700000000.123, "key": "k"}`,
		`{"t": 1700000001.122999999, "key": "k"}`,
		`{"t": 1.700000001123e9, "key": "k"}`,
	)
	got := simulateOK(t, trace, "--algorithm", "token_bucket", "--limit", "1", "--window", "1s")
	if *got[0].Allowed != true || *got[1].Allowed != false || *got[2].Allowed != true {
		t.Errorf("allowed = %v, %v, %v, want true, false, true", *got[0].Allowed, *got[1].Allowed, *got[2].Allowed)
	}
	if got[1].RetryAfter.String() != "0.000000001" {
		t.Errorf("retry_after = %s, want 0.000000001", got[1].RetryAfter)
	}
}

func TestSimulateOneAnswerPerLine(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 50).Draw(t, "lines")
		var b strings.Builder
		want := 0
		for i := range n {
			switch rapid.IntRange(0, 5).Draw(t, "kind") {
			case 0:
				b.WriteString("  \t\r") // blank: skipped
			case 1:
				fmt.Fprintf(&b, `{"t": %d, "key": "k%d", "cost": %d}`, i, i%3, rapid.IntRange(-1, 4).Draw(t, "cost"))
				want++
			default:
				fmt.Fprintf(&b, `{"t": %d.5, "key": "k%d"}`, i/4, i%2)
				want++
			}
			if i < n-1 || rapid.Bool().Draw(t, "final newline") {
				b.WriteString("\n")
			}
		}
		var out, errOut strings.Builder
		code := run([]string{"simulate", "--algorithm", "gcra", "--limit", "3", "--window", "2s"}, strings.NewReader(b.String()), &out, &errOut)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
		if got := strings.Count(out.String(), "\n"); got != want {
			t.Fatalf("%d output lines for %d requests:\n%s", got, want, out.String())
		}
	})
}

func TestSimulateLongLine(t *testing.T) {
	t.Parallel()
	key := strings.Repeat("é", 2048)                                                                  // 4096 bytes, the longest key
	trace := `{"t": 1, "key": "` + key + `", "pad": "` + strings.Repeat("é", 100_000) + `"}` + "\n" + // 200 KB, beyond the reader's buffer
		`{"t": 1, "key": "` + key + `", "pad": "` + strings.Repeat("x", 70_000) + `"}`
	got := simulateOK(t, trace, "--algorithm", "token_bucket", "--limit", "1", "--window", "1s")
	if len(got) != 2 || got[0].Key != key || !*got[0].Allowed || *got[1].Allowed {
		t.Fatalf("got %d answers (first allowed %v), want 2: allowed then denied, same key", len(got), got[0].Allowed)
	}
}

func TestSimulateBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, line, want string
	}{
		{"not JSON", `{"t": 1,}`, "line 3: invalid JSON"},
		{"truncated", `{"t": 1`, "line 3: invalid JSON"},
		{"not an object", `[1, 2]`, "line 3: want a JSON object, got array"},
		{"missing t", `{"key": "a"}`, `line 3: missing "t"`},
		{"t a string", `{"t": "1"}`, `line 3: "t": want a number of seconds, got string "1"`},
		{"t null", `{"t": null}`, `line 3: "t": want a number of seconds, got null`},
		{"t out of range", `{"t": 1e300}`, `line 3: "t": out of range`},
		{"key a number", `{"t": 1, "key": 7}`, `line 3: "key": want a string, got number 7`},
		{"key null", `{"t": 1, "key": null}`, `line 3: "key": want a string, got null`},
		{"cost a fraction", `{"t": 1, "key": "a", "cost": 1.5}`, `line 3: "cost": want an integer, got number 1.5`},
		{"cost an exponent", `{"t": 1, "key": "a", "cost": 1e2}`, `line 3: "cost": want an integer`},
		{"cost a string", `{"t": 1, "key": "a", "cost": "2"}`, `line 3: "cost": want an integer, got string "2"`},
		{"cost a boolean", `{"t": 1, "key": "a", "cost": true}`, `line 3: "cost": want an integer, got boolean true`},
		{"trailing data", `{"t": 1, "key": "a"} {"t": 2}`, "line 3: invalid JSON"},
		{"no key", `{"t": 1, "cost": 2}`, `line 3: missing "key"`},
		{"empty key", `{"t": 1, "key": ""}`, `line 3: "key": empty`},
		{"key too long", `{"t": 1, "key": "` + strings.Repeat("k", 4097) + `"}`, `line 3: "key": 4097 bytes, over the 4096 a key may have`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			trace := lines(`{"t": 0, "key": "a"}`, ``, tt.line, `{"t": 0, "key": "a"}`)
			code, stdout, stderr := runCmd(t, trace, "simulate", "--algorithm", "token_bucket", "--limit", "5", "--window", "1s")
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.HasPrefix(stderr, "sluice simulate: "+tt.want) {
				t.Errorf("stderr = %q, want it to start with %q", stderr, "sluice simulate: "+tt.want)
			}
			if got := parseAnswers(t, stdout); len(got) != 1 {
				t.Errorf("%d answers before the bad line, want 1", len(got))
			}
		})
	}
}

func TestSimulateBadFlags(t *testing.T) {
	t.Parallel()
	base := []string{"--algorithm", "token_bucket", "--limit", "5", "--window", "1s"}
	with := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no flags", nil, "--algorithm: required"},
		{"no limit", []string{"--algorithm", "gcra", "--window", "1s"}, "--limit: required"},
		{"no window", []string{"--algorithm", "gcra", "--limit", "1"}, "--window: required"},
		{"unknown algorithm", []string{"--algorithm", "magic", "--limit", "1", "--window", "1s"}, "--algorithm magic: unknown algorithm (want one of token_bucket"},
		{"zero limit", []string{"--algorithm", "gcra", "--limit", "0", "--window", "1s"}, "--limit: must be positive, got 0"},
		{"huge limit", []string{"--algorithm", "gcra", "--limit", "2000000000", "--window", "1s"}, "--limit: must be at most"},
		{"limit not a number", []string{"--algorithm", "gcra", "--limit", "five", "--window", "1s"}, `invalid value "five" for flag -limit: want an integer`},
		{"zero window", []string{"--algorithm", "gcra", "--limit", "1", "--window", "0s"}, "--window: must be positive"},
		{"window not a duration", []string{"--algorithm", "gcra", "--limit", "1", "--window", "60"}, `invalid value "60" for flag -window: want a duration such as 1m or 500ms`},
		{"burst on a window algorithm", []string{"--algorithm", "fixed_window", "--limit", "1", "--window", "1s", "--burst", "3"}, "--burst: fixed_window does not take a burst"},
		{"zero burst", with("--burst", "0"), "--burst: must be positive when set, got 0"},
		{"negative burst", with("--burst", "-2"), "--burst: must be positive when set, got -2"},
		{"pebble without a dir", with("--backend", "pebble"), "--dir: required with --backend pebble"},
		{"bolt without a dir", with("--backend", "bolt"), "--dir: required with --backend bolt"},
		{"unknown backend", with("--backend", "etcd"), "--backend etcd: unknown backend (want memory, pebble, bolt or redis)"},
		{"redis without an address", with("--backend", "redis"), "--redis-addr: required with --backend redis"},
		{"redis with a dir", with("--backend", "redis", "--redis-addr", "127.0.0.1:1", "--dir", "/tmp/x"), "--dir: the redis backend keeps nothing on disk"},
		{"redis with a durability", with("--backend", "redis", "--redis-addr", "127.0.0.1:1", "--durability", "sync"), "--durability: applies to pebble and bolt"},
		{"redis address without redis", with("--redis-addr", "127.0.0.1:6379"), "--redis-addr: only with --backend redis (the store is memory)"},
		{"redis prefix without redis", with("--backend", "pebble", "--dir", "/tmp/x", "--redis-prefix", "p:"), "--redis-prefix: only with --backend redis (the store is pebble)"},
		{"bad redis address", with("--backend", "redis", "--redis-addr", "localhost"), `invalid value "localhost" for flag -redis-addr: want host:port[,host:port...] such as 127.0.0.1:6379, got "localhost"`},
		{"bad second redis address", with("--backend", "redis", "--redis-addr", "a:1,b"), `invalid value "a:1,b" for flag -redis-addr: want host:port[,host:port...] such as 127.0.0.1:6379, got "b"`},
		{"empty redis prefix", with("--backend", "redis", "--redis-addr", "a:1", "--redis-prefix", ""), `invalid value "" for flag -redis-prefix: must not be empty`},
		{"dir on memory", with("--dir", "/tmp/x"), "--dir: the memory backend keeps nothing on disk"},
		{"durability on memory", with("--durability", "sync"), "--durability: the memory backend is not durable"},
		{"bad durability", with("--durability", "often"), `invalid value "often" for flag -durability: want sync or interval`},
		{"unknown flag", with("--limt", "3"), "flag provided but not defined: -limt"},
		{"positional argument", with("trace.jsonl"), `unexpected argument "trace.jsonl"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCmd(t, `{"t": 1, "key": "a"}`+"\n", append([]string{"simulate"}, tt.args...)...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.HasPrefix(stderr, "sluice simulate: "+tt.want) {
				t.Errorf("stderr = %q, want it to start with %q", stderr, "sluice simulate: "+tt.want)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
		})
	}
}

func TestSimulateExplicitMemoryBackend(t *testing.T) {
	t.Parallel()
	got := simulateOK(t, `{"t": 1, "key": "a"}`, "--backend", "memory", "--algorithm", "leaky_bucket", "--limit", "2", "--window", "1s", "--burst", "4")
	if len(got) != 1 || !*got[0].Allowed || got[0].Limit != 4 || got[0].Remaining != 3 || got[0].Reset.String() != "0.5" {
		t.Fatalf("got %+v, want one allowed answer, limit 4, remaining 3, reset 0.5", got)
	}
}

// simulate --store reads the store from a file's store section, as rls
// does: here a redis-server whose commands only a user with a password
// may run, which the file names (username, password_file) and no flag can
// give. The answers are --backend memory's, the run's records are deleted
// at its end, and the store flags go over the file's, field by field.
func TestSimulateRedisStoreFile(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	s.Do(t, "ACL", "SETUSER", "gateway", "on", ">s3cret", "~*", "&*", "+@all")
	s.Do(t, "ACL", "SETUSER", "default", "-@all", "+ping", "+info", "+scan") // what the test's redis-cli needs
	prefix := testPrefix(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "password"), "s3cret\n")
	store := filepath.Join(dir, "store.yaml")
	writeFile(t, store, fmt.Sprintf(`store:
  backend: redis
  redis:
    addrs: [%s]
    username: gateway
    password_file: %s
    key_prefix: %q
    timeout: 100ms
`, s.Addr, filepath.Join(dir, "password"), prefix))
	args := []string{"simulate", "--algorithm", "sliding_counter", "--limit", "5", "--window", "1s"}
	trace := simTrace(1, 200, time.Second, 5)
	code, want, stderr := runCmd(t, trace, args...)
	if code != 0 {
		t.Fatalf("memory: exit %d: %s", code, stderr)
	}
	code, got, stderr := runCmd(t, trace, append(args, "--store", store)...)
	if code != 0 {
		t.Fatalf("--store %s: exit %d: %s", store, code, stderr)
	}
	if got != want {
		t.Fatalf("--store printed\n%s\nwhere memory printed\n%s", got, want)
	}
	if calls := s.CommandCalls(t); calls["evalsha"]+calls["eval"]+calls["set"] < 100 {
		t.Errorf("the trace of 200 requests did not reach Redis: commandstats %v", calls)
	}
	if keys := redisKeys(t, s, prefix); len(keys) != 0 {
		t.Errorf("simulate left %d keys in Redis, such as %s", len(keys), keys[0])
	}

	// The flags go over the file: the address, here one nothing listens
	// on, and the file's password still applies.
	closed := closedAddr(t)
	code, _, stderr = runCmd(t, trace, append(args, "--store", store, "--redis-addr", closed)...)
	if code != 1 || !strings.Contains(stderr, closed) {
		t.Errorf("--redis-addr %s over the file: exit %d, %s; want 1 naming the address", closed, code, stderr)
	}
	// The flags alone cannot give the user: the server refuses them.
	code, _, stderr = runCmd(t, trace, append(args, "--backend", "redis", "--redis-addr", s.Addr)...)
	if code != 1 || !strings.Contains(stderr, "NOPERM") {
		t.Errorf("without the file's password: exit %d, %s; want 1, refused", code, stderr)
	}
	// A file that is not there, or has no valid store section, is a usage
	// error naming --store.
	missing := filepath.Join(dir, "missing.yaml")
	if code, _, stderr := runCmd(t, trace, append(args, "--store", missing)...); code != 2 || !strings.Contains(stderr, "--store: ") {
		t.Errorf("--store %s: exit %d, %s; want 2 naming --store", missing, code, stderr)
	}
}

// simulate --store refuses a file whose store is on disk: that is a
// gateway's own directory, and a trace's records would stay in it beside
// its callers'. The message names the flags that give the trace a
// directory of its own, and nothing is created there.
func TestSimulateStoreFileOnDiskRefused(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"pebble", "bolt"} {
		dir := t.TempDir()
		data := filepath.Join(dir, "data")
		store := filepath.Join(dir, "gateway.yaml")
		writeFile(t, store, fmt.Sprintf("store:\n  backend: %s\n  dir: %s\n", name, data))
		code, _, stderr := runCmd(t, simTrace(1, 3, time.Second, 1), "simulate", "--algorithm", "gcra", "--limit", "5", "--window", "1s", "--store", store)
		if code != 2 || !strings.Contains(stderr, "--backend "+name+" --dir DIR") {
			t.Fatalf("%s: exit %d, %q; want 2 and the flags for a directory of the trace's own", name, code, stderr)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Fatalf("%s: the gateway's directory was touched: %v", name, err)
		}
	}
}
