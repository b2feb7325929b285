package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/codec"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
)

// A key of 2 MiB, 7,000 times the 300 bytes the table shows of one, fills
// at most a few hundred bytes of inspect's table, as its first bytes, its
// length and its fingerprint, so that two long keys differing only in
// their last byte are two rows told apart; --json lists every key whole.
//
// inspect runs as a real process, as an operator runs it: under the race
// detector, its two runs over these keys took most of a minute of CPU
// (each key read, quoted and hashed byte by byte), about half the test's,
// and inspect does its work on one goroutine. The keys are 2 MiB, not the
// 10 MiB they were: writing them into Pebble in this process, whose every
// copy of a key the race detector checks byte range by byte range, took
// most of the rest.
func TestInspectTableBoundsLongKeys(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := t.TempDir()
	long := strings.Repeat("k", 2<<20)
	cutKey := fmt.Sprintf("… (%d bytes, sha256 ", len("user:"+long+"a"))
	exp := int64(1_700_000_100e9)
	rec := codec.AppendGCRA(nil, codec.GCRA{TAT: 1_700_000_010e9})
	putRecords(t, "pebble", dir,
		backend.Record{Key: engine.AppendKey(nil, "api", "user:"+long+"a"), Value: rec, ExpiresAt: exp},
		backend.Record{Key: engine.AppendKey(nil, "api", "user:"+long+"b"), Value: rec, ExpiresAt: exp},
		backend.Record{Key: engine.AppendKey(nil, "api", "user:short"), Value: rec, ExpiresAt: exp},
		backend.Record{Key: engine.AppendKey(nil, strings.Repeat("n", 1<<20), "user:x"), Value: rec, ExpiresAt: exp},
		backend.Record{Key: append(engine.AppendKey(nil, "api", "user:"), append([]byte{0xff}, long...)...), Value: rec, ExpiresAt: exp},
	)
	inspect := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"inspect", "--backend", "pebble", "--dir", dir, "--now", inspectNow}, args...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("inspect %q: %v; stderr:\n%.2000s", args, err, stderr.String())
		}
		return stdout.String()
	}
	stdout := inspect()
	if len(stdout) > 16<<10 {
		t.Fatalf("a table of 5 records with keys of up to 2 MiB is %d bytes, want at most 16 KiB:\n%s", len(stdout), stdout)
	}
	rows := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(rows) != 6 {
		t.Fatalf("%d lines, want 6:\n%s", len(rows), stdout)
	}
	var cut []string
	for _, row := range rows[1:] {
		if strings.Contains(row, cutKey) {
			cut = append(cut, strings.Join(strings.Fields(row), " "))
		}
	}
	if len(cut) != 3 || cut[0] == cut[1] {
		t.Errorf("want three rows of cut 2 MiB keys, the two valid ones told apart:\n%s", stdout)
	}
	for _, want := range []string{" user:short ", "… (1048576 bytes, sha256 ", "(hex 03617069" /* the non-UTF-8 key in hex, cut too */} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	// --json shows the keys whole, for a program to act on.
	views := parseInspectJSON(t, inspect("--json"))
	whole := 0
	for _, v := range views {
		if v.Key == "user:"+long+"a" || v.Key == "user:"+long+"b" {
			whole++
		}
	}
	if whole != 2 {
		t.Errorf("--json listed %d of the two long keys whole", whole)
	}
}

// A trace line that quotes a huge value is reported in a few hundred
// bytes, naming its line; a key over 4096 bytes is refused, so no answer
// echoes more of the trace than that.
func TestSimulateErrorsAreBounded(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("7", 1<<20)
	for _, c := range []struct{ name, line, want string }{
		{"cost fraction", `{"t": 1, "key": "a", "cost": 1.` + huge + `}`, `line 2: "cost": want an integer, got number 1.777`},
		{"cost exponent", `{"t": 1, "key": "a", "cost": ` + huge + `e1}`, `line 2: "cost": want an integer, got number 777`},
		{"key", `{"t": 1, "key": "` + huge + `"}`, `line 2: "key": 1048576 bytes, over the 4096 a key may have`},
		{"t", `{"t": "` + huge + `"}`, `line 2: "t": want a number of seconds, got string`},
		{"no key", `{"t": 1, "pad": "` + huge + `"}`, `line 2: missing "key"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCmd(t, lines(`{"t": 0, "key": "a"}`, c.line), "simulate", "--algorithm", "gcra", "--limit", "5", "--window", "1s")
			if code != 2 || !strings.HasPrefix(stderr, "sluice simulate: "+c.want) || len(stderr) > 300 {
				t.Errorf("exit %d, stderr of %d bytes %.400q; want 2 and %q in a few hundred bytes", code, len(stderr), stderr, c.want)
			}
			if strings.Count(stdout, "\n") != 1 {
				t.Errorf("stdout %q: want the first line's answer", stdout)
			}
		})
	}
}

// A real serve process flooded with distinct user ids of up to 50 KiB, on
// paths of 64 KiB, in front of an upstream that is down: every id over
// identity.MaxUserIDLen is answered 400 and stored nowhere, every other is
// stored under a key of at most identity.MaxKeyLen bytes (read back with
// inspect once SIGTERM has flushed the store), and each upstream error's
// log line quotes a few hundred bytes of the path.
func TestServeProcessIdentityFloodIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sluice.yaml")
	state := filepath.Join(dir, "state")
	store := fmt.Sprintf("  backend: pebble\n  dir: %s\n  durability: interval\n  flush_interval: 1h", state)
	// orders-write over a day, not a minute: a user's spent token then
	// comes back in hours, so no record is complete again (and dropped)
	// before SIGTERM flushes it, however long a loaded machine takes to
	// send the flood.
	cfg := strings.Replace(gatewayConfig(store, "10.0.0.0/8", 100), "    limit: 5\n    window: 1m\n", "    limit: 5\n    window: 24h\n", 1)
	if !strings.Contains(cfg, "window: 24h") {
		t.Fatal("gatewayConfig's orders-write rule is no longer 5 a minute: change the replacement")
	}
	writeFile(t, cfgPath, cfg)
	p := startServeProcess(t, bin, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", "http://"+closedAddr(t))
	base := "http://" + p.listen
	path := "/api/orders/" + strings.Repeat("p", 64<<10)
	const each = 60
	for i := range each {
		id := fmt.Sprintf("%d-", i)
		short := id + strings.Repeat("u", identity.MaxUserIDLen-len(id)-i)
		long := id + strings.Repeat("u", identity.MaxUserIDLen+i*850)
		if code, _ := send(t, "POST", base+path, "X-User-ID", short); code != 502 {
			t.Fatalf("user id of %d bytes: %d, want 502 (allowed, the upstream down)", len(short), code)
		}
		if code, _ := send(t, "POST", base+path, "X-User-ID", long); code != 400 {
			t.Fatalf("user id of %d bytes: %d, want 400", len(long), code)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 15*time.Second); err != nil {
		t.Fatalf("serve: %v\n%.2000s", err, p.stderr)
	}
	logs := p.stderr.String()
	if n := strings.Count(logs, "upstream error"); n != each {
		t.Errorf("%d upstream errors logged, want %d", n, each)
	}
	if len(logs) > each*1536+8192 {
		t.Errorf("%d bytes logged for %d upstream errors on 64 KiB paths, want at most 1.5 KiB each", len(logs), each)
	}
	views := inspectJSON(t, "--backend", "pebble", "--dir", state)
	users := 0
	for _, v := range views {
		if len(v.Key) > identity.MaxKeyLen {
			t.Errorf("%s stores a key of %d bytes, over %d", v.Namespace, len(v.Key), identity.MaxKeyLen)
		}
		if v.Namespace == "orders-write" {
			users++
		}
	}
	if users != each {
		t.Errorf("%d users stored under orders-write, want %d: each accepted id, no refused one", users, each)
	}
}
