package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/bolt"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/codec"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
)

// inspectNow is the --now of these tests: ten seconds after the traces'
// requests at 1700000000 (2023-11-14T22:13:20Z).
const inspectNow = "2023-11-14T22:13:30Z"

// durableBackends are the stores inspect reads.
var durableBackends = []string{"pebble", "bolt"}

// simulateInto runs simulate in-process over trace against the store in dir,
// with a limit of 5 per minute, and requires exit status 0.
func simulateInto(t *testing.T, backendName, dir, algorithm, trace string) {
	t.Helper()
	code, _, stderr := runCmd(t, trace, "simulate", "--backend", backendName, "--dir", dir,
		"--algorithm", algorithm, "--limit", "5", "--window", "1m")
	if code != 0 {
		t.Fatalf("simulate %s: exit %d; stderr:\n%s", algorithm, code, stderr)
	}
}

// openStore opens the store in dir in the test, without its sweeper.
func openStore(t *testing.T, backendName, dir string) rangeStore {
	t.Helper()
	var (
		s   rangeStore
		err error
	)
	if backendName == "pebble" {
		s, err = pebble.Open(dir, &pebble.Options{SweepInterval: -1})
	} else {
		s, err = bolt.Open(dir, &bolt.Options{SweepInterval: -1})
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// putRecords writes records straight into the store in dir.
func putRecords(t *testing.T, backendName, dir string, recs ...backend.Record) {
	t.Helper()
	s := openStore(t, backendName, dir)
	for _, r := range recs {
		if err := s.Put(r.Key, r.Value, r.ExpiresAt); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// inspectJSON runs inspect --json with args and returns its records.
func inspectJSON(t *testing.T, args ...string) []recordView {
	t.Helper()
	code, stdout, stderr := runCmd(t, "", append([]string{"inspect", "--json", "--now", inspectNow}, args...)...)
	if code == 1 && stdout == "" && strings.Contains(stderr, "no record of ") {
		return nil // --key named a caller with no record
	}
	if code != 0 {
		t.Fatalf("inspect %q: exit %d; stderr:\n%s", args, code, stderr)
	}
	return parseInspectJSON(t, stdout)
}

// parseInspectJSON returns the records of inspect --json's output.
func parseInspectJSON(t *testing.T, stdout string) []recordView {
	t.Helper()
	var views []recordView
	for _, line := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		if line == "" {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(line))
		dec.UseNumber()
		dec.DisallowUnknownFields()
		var v recordView
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("inspect --json line %q: %v", line, err)
		}
		views = append(views, v)
	}
	return views
}

// fillStore runs one short trace per algorithm into dir, each on its own
// key, and returns what inspect must say about each at inspectNow.
func fillStore(t *testing.T, backendName, dir string) map[string]string {
	t.Helper()
	at := func(t, key string) string { return `{"t": ` + t + `, "key": "` + key + `"}` }
	simulateInto(t, backendName, dir, "token_bucket", lines(repeat(3, at("1700000000", "tb"))...))
	simulateInto(t, backendName, dir, "leaky_bucket", lines(repeat(2, at("1700000000", "lb"))...))
	simulateInto(t, backendName, dir, "fixed_window", lines(repeat(4, at("1700000000", "fw"))...))
	simulateInto(t, backendName, dir, "sliding_counter", lines(at("1699999990", "sc"), at("1699999990", "sc"), at("1700000045", "sc")))
	simulateInto(t, backendName, dir, "gcra", lines(repeat(2, at("1700000000", "gc"))...))
	simulateInto(t, backendName, dir, "sliding_log", lines(at("1700000000", "sl"), at("1700000001.5", "sl"), at("1700000003", "sl")))
	// Each key's table row after the namespace and key, fields separated
	// by single spaces.
	return map[string]string{
		// 3 of 5 tokens spent at 22:13:20; full again 3 × 12 s later.
		"tb": "token_bucket spent=3 updated=2023-11-14T22:13:20Z 2023-11-14T22:13:56Z 26s",
		// 2 queued, drained 2 × 12 s later.
		"lb": "leaky_bucket level=2 updated=2023-11-14T22:13:20Z 2023-11-14T22:13:44Z 14s",
		// Minute windows aligned to the epoch: 22:13:00 to 22:14:00.
		"fw": "fixed_window start=2023-11-14T22:13:00Z count=4 2023-11-14T22:14:00Z 30s",
		// Two in the 22:13 window, one in the 22:14 one; the record
		// matters until the end of the next window.
		"sc": "sliding_counter start=2023-11-14T22:14:00Z count=1 previous=2 2023-11-14T22:16:00Z 2m30s",
		// One emission interval (12 s) per request.
		"gc": "gcra tat=2023-11-14T22:13:44Z 2023-11-14T22:13:44Z 14s",
		// A one-minute log keeps times in steps of 2^15 ns, rounded up
		// from the entry before: 1.5 s is 45776.4 steps, stored as 45777,
		// and so on.
		"sl": "sliding_log entries=3 oldest=2023-11-14T22:13:20Z newest=2023-11-14T22:13:23Z 2023-11-14T22:14:23Z 53s",
	}
}

func TestInspectTable(t *testing.T) {
	t.Parallel()
	for _, b := range durableBackends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			want := fillStore(t, b, dir)
			code, stdout, stderr := runCmd(t, "", "inspect", "--backend", b, "--dir", dir, "--now", inspectNow)
			if code != 0 || stderr != "" {
				t.Fatalf("inspect: exit %d; stderr:\n%s", code, stderr)
			}
			rows := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			if got := strings.Fields(rows[0]); strings.Join(got, " ") != "NAMESPACE KEY ALGORITHM STATE EXPIRES TTL" {
				t.Errorf("header %q", rows[0])
			}
			if len(rows) != 1+len(want) {
				t.Fatalf("%d rows, want %d:\n%s", len(rows)-1, len(want), stdout)
			}
			// Aligned: every row's third column starts where the header's does.
			col := strings.Index(rows[0], "ALGORITHM")
			for i, row := range rows[1:] {
				f := strings.Fields(row)
				if f[0] != "simulate" {
					t.Errorf("row %d: namespace %q, want simulate", i+1, f[0])
				}
				if got := strings.Join(f[2:], " "); got != want[f[1]] {
					t.Errorf("key %s:\n got  %s\n want %s", f[1], got, want[f[1]])
				}
				if len(row) <= col || row[col-1] != ' ' || row[col] == ' ' {
					t.Errorf("row %d is not aligned with the header:\n%s\n%s", i+1, rows[0], row)
				}
			}
			// Keys are listed in order.
			for i, key := range []string{"fw", "gc", "lb", "sc", "sl", "tb"} {
				if f := strings.Fields(rows[i+1]); f[1] != key {
					t.Errorf("row %d is key %s, want %s", i+1, f[1], key)
				}
			}
		})
	}
}

func TestInspectJSON(t *testing.T) {
	t.Parallel()
	for _, b := range durableBackends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			fillStore(t, b, dir)
			views := inspectJSON(t, "--backend", b, "--dir", dir)
			byKey := map[string]recordView{}
			for _, v := range views {
				if v.Namespace != "simulate" || v.Corrupt || v.State == nil || v.Error != "" || v.Expired {
					t.Errorf("record %+v: want a live, sound record in namespace simulate", v)
				}
				byKey[v.Key] = v
			}
			if len(byKey) != 6 {
				t.Fatalf("%d records, want 6", len(byKey))
			}
			str := func(v *string) string {
				if v == nil {
					return "<nil>"
				}
				return *v
			}
			num := func(v *json.Number) string {
				if v == nil {
					return "<nil>"
				}
				return v.String()
			}
			tb := byKey["tb"]
			if tb.Algorithm != "token_bucket" || tb.State.get("spent") != "3" || tb.State.get("updated_at") != "2023-11-14T22:13:20Z" ||
				str(tb.ExpiresAt) != "2023-11-14T22:13:56Z" || num(tb.TTLSeconds) != "26" {
				t.Errorf("token bucket after 3 of 5/min: %+v, state %+v", tb, *tb.State)
			}
			if lb := byKey["lb"]; lb.Algorithm != "leaky_bucket" || lb.State.get("level") != "2" || num(lb.TTLSeconds) != "14" {
				t.Errorf("leaky bucket: %+v, state %+v", lb, *lb.State)
			}
			if fw := byKey["fw"]; fw.Algorithm != "fixed_window" || fw.State.get("window_start") != "2023-11-14T22:13:00Z" || fw.State.get("count") != "4" || fw.State.has("previous") {
				t.Errorf("fixed window: %+v, state %+v", fw, *fw.State)
			}
			if sc := byKey["sc"]; sc.Algorithm != "sliding_counter" || sc.State.get("window_start") != "2023-11-14T22:14:00Z" || sc.State.get("count") != "1" || sc.State.get("previous") != "2" {
				t.Errorf("sliding counter: %+v, state %+v", sc, *sc.State)
			}
			if gc := byKey["gc"]; gc.Algorithm != "gcra" || gc.State.get("tat") != "2023-11-14T22:13:44Z" {
				t.Errorf("gcra: %+v, state %+v", gc, *gc.State)
			}
			if sl := byKey["sl"]; sl.Algorithm != "sliding_log" || sl.State.get("entries") != "3" ||
				sl.State.get("oldest") != "2023-11-14T22:13:20Z" || sl.State.get("newest") != "2023-11-14T22:13:23Z" ||
				num(sl.TTLSeconds) != "53" {
				t.Errorf("sliding log: %+v, state %+v", sl, *sl.State)
			}
			// raw is the record itself.
			raw, err := hex.DecodeString(tb.Raw)
			if err != nil {
				t.Fatal(err)
			}
			if s, err := codec.DecodeTokenBucket(raw); err != nil || s.Spent != 3e9 || s.Updated != 1_700_000_000e9 {
				t.Errorf("raw %s decodes to %+v, %v", tb.Raw, s, err)
			}
		})
	}
}

// A bucket's level is printed exactly, however fine its fraction.
func TestInspectLevelIsExact(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		nano int64
		want string
	}{
		{0, "0"}, {3_250_000_000, "3.25"}, {1, "0.000000001"}, {5e9, "5"}, {math.MaxInt64, "9223372036.854775807"},
	} {
		rec := codec.AppendBucket(nil, codec.TagTokenBucket, codec.Bucket{Updated: 0, Level: c.nano})
		v := describeRecord(backend.Record{Key: engine.AppendKey(nil, "n", "k"), Value: rec}, 0)
		if v.State == nil || v.State.get("level") != c.want {
			t.Errorf("level %d nano-tokens: %+v, want %s", c.nano, v.State, c.want)
		}
	}
}

// Expiry: past is "expired" with a TTL of 0; no expiry is "never", null in
// JSON.
func TestInspectExpiry(t *testing.T) {
	t.Parallel()
	key := engine.AppendKey(nil, "n", "k")
	rec := codec.AppendGCRA(nil, codec.GCRA{TAT: 5e9})
	for _, c := range []struct {
		exp, now int64
		expires  string // the table's EXPIRES and TTL
		json     string // the JSON fields
	}{
		{5e9, 3e9, "1970-01-01T00:00:05Z 2s", `"expires_at":"1970-01-01T00:00:05Z","ttl_seconds":2,"expired":false`},
		{5e9, 5e9, "1970-01-01T00:00:05Z expired", `"expires_at":"1970-01-01T00:00:05Z","ttl_seconds":0,"expired":true`},
		{5e9, 9e9, "1970-01-01T00:00:05Z expired", `"expires_at":"1970-01-01T00:00:05Z","ttl_seconds":0,"expired":true`},
		{0, 9e9, "never -", `"expires_at":null,"ttl_seconds":null,"expired":false`},
		{-1, 9e9, "never -", `"expires_at":null,"ttl_seconds":null,"expired":false`},
		// As far apart as int64 times can be: the TTL saturates.
		{math.MaxInt64, math.MinInt64, "2262-04-11T23:47:16.854775807Z 2562047h47m16.854775807s", `"ttl_seconds":9223372036.854775807,`},
	} {
		v := describeRecord(backend.Record{Key: key, Value: rec, ExpiresAt: c.exp}, c.now)
		var table bytes.Buffer
		p := newTablePrinter(&table)
		p.print(v)
		p.flush()
		row := strings.Fields(strings.Split(table.String(), "\n")[1])
		if got := strings.Join(row[len(row)-2:], " "); got != c.expires {
			t.Errorf("expiry %d at %d: table says %q, want %q", c.exp, c.now, got, c.expires)
		}
		js, _ := json.Marshal(v)
		if !strings.Contains(string(js), c.json) {
			t.Errorf("expiry %d at %d: JSON %s, want it to contain %s", c.exp, c.now, js, c.json)
		}
	}
}

// apiKeyHex is the hash of the API key sk_live_1, as the gateway keys its
// caller (apiKeyHash) and inspect shows it (keyhash:apiKeyHex).
var (
	apiKeyHash = func() string { k, _ := identity.New(identity.Config{}); h, _ := k.ParseKey("key:sk_live_1"); return h }()
	apiKeyHex  = strings.TrimPrefix(apiKeyHash, "key:")
)

func TestInspectFilters(t *testing.T) {
	t.Parallel()
	for _, b := range durableBackends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			fillStore(t, b, dir)
			// The same caller under another rule, and a caller whose key
			// starts with the first's.
			rec := codec.AppendGCRA(nil, codec.GCRA{TAT: 1_700_000_010e9})
			putRecords(t, b, dir,
				backend.Record{Key: engine.AppendKey(nil, "api", "tb"), Value: rec, ExpiresAt: 1_700_000_010e9},
				backend.Record{Key: engine.AppendKey(nil, "simulate", "tb2"), Value: rec, ExpiresAt: 1_700_000_010e9},
				// An API-key caller as the gateway stores it.
				backend.Record{Key: engine.AppendKey(nil, "search", apiKeyHash), Value: rec, ExpiresAt: 1_700_000_010e9},
			)
			keys := func(views []recordView) string {
				var s []string
				for _, v := range views {
					s = append(s, v.Namespace+"/"+v.Key)
				}
				return strings.Join(s, " ")
			}
			for _, c := range []struct {
				args []string
				want string
			}{
				{[]string{"--key", "tb"}, "api/tb simulate/tb"},
				{[]string{"--key", "tb", "--namespace", "simulate"}, "simulate/tb"},
				{[]string{"--key", "tb", "--namespace", "api"}, "api/tb"},
				{[]string{"--key", "tb", "--namespace", "none"}, ""},
				{[]string{"--key", "nobody"}, ""},
				{[]string{"--namespace", "api"}, "api/tb"},
				{[]string{"--namespace", "simulate", "--limit", "3"}, "simulate/fw simulate/gc simulate/lb"},
				{[]string{"--limit", "1"}, "api/tb"},
				{[]string{"--limit", "0"}, "api/tb search/keyhash:" + apiKeyHex + " simulate/fw simulate/gc simulate/lb simulate/sc simulate/sl simulate/tb simulate/tb2"},
				{[]string{"--key", ""}, ""},
				// The raw API key, hashed as the gateway hashes it, and the
				// hash as inspect shows it, find the caller; the hash
				// written as key:HEX is a raw key, which no caller has.
				{[]string{"--key", "key:sk_live_1"}, "search/keyhash:" + apiKeyHex},
				{[]string{"--key", "keyhash:" + apiKeyHex}, "search/keyhash:" + apiKeyHex},
				{[]string{"--key", "key:" + apiKeyHex}, ""},
			} {
				got := keys(inspectJSON(t, append([]string{"--backend", b, "--dir", dir}, c.args...)...))
				if got != c.want {
					t.Errorf("inspect %q lists %q, want %q", c.args, got, c.want)
				}
			}
		})
	}
}

// --key naming a caller with no record lists nothing, says so, and exits
// 1, as reset does: a listing that is empty for a typo and for a full
// budget alike would be read as "the caller is fine" either way.
func TestInspectKeyWithNoRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fillStore(t, "pebble", dir)
	code, stdout, stderr := runCmd(t, "", "inspect", "--backend", "pebble", "--dir", dir, "--key", "user:nobody")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "no record of user:nobody") || !strings.Contains(stderr, "budget is full") {
		t.Fatalf("inspect --key user:nobody: exit %d, stdout %q, stderr %q; want 1, nothing listed, and why", code, stdout, stderr)
	}
	if code, _, stderr := runCmd(t, "", "inspect", "--backend", "pebble", "--dir", dir, "--namespace", "none"); code != 0 {
		t.Fatalf("inspect --namespace none (no --key): exit %d, %q; want 0, an empty listing", code, stderr)
	}
}

// --limit caps the listing (100 by default) and says on stderr that it
// left records out.
func TestInspectLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var trace []string
	for i := range 120 {
		trace = append(trace, `{"t": 1700000000, "key": "u-`+string(rune('a'+i/26))+string(rune('a'+i%26))+`"}`)
	}
	simulateInto(t, "pebble", dir, "fixed_window", lines(trace...))
	for _, c := range []struct {
		args []string
		rows int
		note string
	}{
		{nil, 100, "listed the first 100 records; --limit 0 lists them all"},
		{[]string{"--limit", "7"}, 7, "listed the first 7 records"},
		{[]string{"--limit", "120"}, 120, ""},
		{[]string{"--limit", "0"}, 120, ""},
	} {
		code, stdout, stderr := runCmd(t, "", append([]string{"inspect", "--backend", "pebble", "--dir", dir}, c.args...)...)
		if code != 0 {
			t.Fatalf("inspect %q: exit %d; stderr:\n%s", c.args, code, stderr)
		}
		if got := strings.Count(stdout, "\n") - 1; got != c.rows {
			t.Errorf("inspect %q: %d rows, want %d", c.args, got, c.rows)
		}
		if (c.note == "") != (stderr == "") || !strings.Contains(stderr, c.note) {
			t.Errorf("inspect %q: stderr %q, want %q", c.args, stderr, c.note)
		}
	}
}

// A store another Store holds is refused with the store's error, which
// names the directory, and exit status 1.
func TestInspectLockedDirectory(t *testing.T) {
	t.Parallel()
	for _, b := range durableBackends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := openStore(t, b, dir)
			defer s.Close()
			code, stdout, stderr := runCmd(t, "", "inspect", "--backend", b, "--dir", dir)
			if code != 1 || stdout != "" {
				t.Fatalf("inspect of a held store: exit %d, stdout %q; want 1 and nothing", code, stdout)
			}
			for _, want := range []string{strconv.Quote(dir), "lock", "stop the gateway or simulate process using " + dir} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr %q does not contain %q", stderr, want)
				}
			}
		})
	}
}

// Records that do not decode are listed as corrupt, with their bytes.
func TestInspectCorrupt(t *testing.T) {
	t.Parallel()
	for _, b := range durableBackends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			simulateInto(t, b, dir, "token_bucket", lines(`{"t": 1700000000, "key": "ok"}`))
			exp := int64(1_700_000_100e9)
			putRecords(t, b, dir,
				backend.Record{Key: engine.AppendKey(nil, "simulate", "short"), Value: []byte{0x11, 0x02, 0x03}, ExpiresAt: exp},
				backend.Record{Key: engine.AppendKey(nil, "simulate", "version"), Value: append([]byte{0x31}, make([]byte, 16)...), ExpiresAt: exp},
				backend.Record{Key: engine.AppendKey(nil, "simulate", "tag"), Value: []byte{0x1f, 0xee}, ExpiresAt: exp},
				backend.Record{Key: engine.AppendKey(nil, "simulate", "negative"), Value: codec.AppendBucket(nil, codec.TagTokenBucket, codec.Bucket{Level: -1}), ExpiresAt: exp},
				backend.Record{Key: engine.AppendKey(nil, "simulate", "garbage"), Value: []byte("hogwash!"), ExpiresAt: exp},
				backend.Record{Key: []byte{0xff, 0xff}, Value: codec.AppendGCRA(nil, codec.GCRA{TAT: 1}), ExpiresAt: exp},
			)
			views := inspectJSON(t, "--backend", b, "--dir", dir)
			byKey := map[string]recordView{}
			for _, v := range views {
				byKey[v.Key] = v
			}
			for _, c := range []struct {
				key, alg, err, raw string
			}{
				{"short", "token_bucket", "truncated", "110203"},
				{"version", "token_bucket", "unknown version 3", "31" + strings.Repeat("00", 16)},
				{"tag", "", "unknown algorithm tag 15", "1fee"},
				{"negative", "token_bucket", "invalid field", ""},
				{"garbage", "", "unknown algorithm tag 8", hex.EncodeToString([]byte("hogwash!"))},
			} {
				v, ok := byKey[c.key]
				if !ok {
					t.Errorf("%s: not listed", c.key)
					continue
				}
				if !v.Corrupt || v.State != nil || v.Algorithm != c.alg || !strings.Contains(v.Error, c.err) || !strings.HasPrefix(v.Raw, c.raw) {
					t.Errorf("%s: %+v; want corrupt %s with error %q and raw %s", c.key, v, c.alg, c.err, c.raw)
				}
			}
			if v := byKey["ok"]; v.Corrupt || v.State == nil {
				t.Errorf("the sound record: %+v", v)
			}
			if v := byKey[""]; !v.Corrupt || v.KeyHex != "ffff" || v.State == nil || v.Algorithm != "gcra" {
				t.Errorf("a key that does not split: %+v", v)
			}
			// The table lists them too, one row each.
			code, stdout, stderr := runCmd(t, "", "inspect", "--backend", b, "--dir", dir)
			if code != 0 {
				t.Fatalf("inspect: exit %d; stderr:\n%s", code, stderr)
			}
			if got := strings.Count(stdout, "\n"); got != 1+7 {
				t.Errorf("%d lines, want 8:\n%s", got, stdout)
			}
			for _, want := range []string{
				"simulate short token_bucket corrupt: sluice/codec: truncated record: token_bucket needs 17 bytes, have 3; raw 110203 2023-11-14T22:15:00Z",
				`"" "" (hex ffff) gcra tat=1970-01-01T00:00:00.000000001Z corrupt="key is not a namespaced key" 2023-11-14T22:15:00Z`,
			} {
				found := false
				for _, row := range strings.Split(stdout, "\n") {
					found = found || strings.HasPrefix(strings.Join(strings.Fields(row), " "), want)
				}
				if !found {
					t.Errorf("no row starts with %q:\n%s", want, stdout)
				}
			}
		})
	}
}

// Keys that would break the table's columns are quoted.
func TestInspectTableQuotesKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	simulateInto(t, "bolt", dir, "gcra", lines(
		`{"t": 1700000000, "key": "a b"}`,
		`{"t": 1700000000, "key": "line\nbreak\ttab"}`,
		`{"t": 1700000000, "key": "\"q\""}`,
		`{"t": 1700000000, "key": "ünï"}`,
	))
	// An empty key, which no trace may have but a store can hold.
	putRecords(t, "bolt", dir, backend.Record{Key: engine.AppendKey(nil, "simulate", ""), Value: codec.AppendGCRA(nil, codec.GCRA{TAT: 1_700_000_010e9}), ExpiresAt: 1_700_000_100e9})
	code, stdout, stderr := runCmd(t, "", "inspect", "--backend", "bolt", "--dir", dir)
	if code != 0 {
		t.Fatalf("inspect: exit %d; stderr:\n%s", code, stderr)
	}
	if got := strings.Count(stdout, "\n"); got != 6 {
		t.Errorf("%d lines, want 6:\n%s", got, stdout)
	}
	for _, want := range []string{` "" `, ` "a b" `, ` "line\nbreak\ttab" `, ` "\"q\"" `, ` ünï `} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table does not contain %s:\n%s", want, stdout)
		}
	}
}

func TestInspectBadFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{nil, "--backend: required"},
		{[]string{"--dir", dir}, "--backend: required"},
		{[]string{"--backend", "memory", "--dir", dir}, "--backend memory: the memory backend keeps nothing"},
		{[]string{"--backend", "etcd", "--dir", dir}, "--backend etcd: unknown backend (want pebble, bolt or redis)"},
		{[]string{"--backend", "redis", "--dir", dir}, "--dir: the redis backend keeps nothing on disk"},
		{[]string{"--backend", "redis"}, "--redis-addr: required with --backend redis"},
		{[]string{"--backend", "pebble", "--dir", dir, "--redis-addr", "a:1"}, "--redis-addr: only with --backend redis (the store is pebble)"},
		{[]string{"--backend", "redis", "--redis-addr", "nowhere"}, `invalid value "nowhere" for flag -redis-addr`},
		{[]string{"--config", filepath.Join(dir, "missing.yaml")}, "--config: open "},
		{[]string{"--backend", "pebble"}, "--dir: required"},
		{[]string{"--backend", "pebble", "--dir", dir, "--limit", "-1"}, "--limit: must be 0 (all) or more, got -1"},
		{[]string{"--backend", "pebble", "--dir", dir, "--limit", "many"}, "-limit"},
		{[]string{"--backend", "pebble", "--dir", dir, "--now", "yesterday"}, "--now yesterday: want an RFC 3339 time"},
		{[]string{"--backend", "pebble", "--dir", dir, "--now", "2300-01-01T00:00:00Z"}, "--now 2300-01-01T00:00:00Z: outside the years"},
		{[]string{"--backend", "pebble", "--dir", dir, "--verbose"}, "-verbose"},
		{[]string{"--backend", "pebble", "--dir", dir, "extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCmd(t, "", append([]string{"inspect"}, tt.args...)...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "sluice inspect -h") {
			t.Errorf("inspect %q: exit %d, stdout %q, stderr %q; want 2 and %q", tt.args, code, stdout, stderr, tt.want)
		}
	}
	// -h prints the usage and succeeds.
	if code, stdout, _ := runCmd(t, "", "inspect", "-h"); code != 0 || !strings.Contains(stdout, "Usage: sluice inspect") || !strings.Contains(stdout, "-namespace") {
		t.Errorf("inspect -h: exit %d, stdout %q", code, stdout)
	}
}

// A directory without a store is an error, and inspect does not create one
// there.
func TestInspectNoStore(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		backend, dir, want string
	}{
		{"pebble", filepath.Join(root, "missing"), "no such file or directory"},
		{"bolt", filepath.Join(root, "missing"), "no such file or directory"},
		{"pebble", empty, "holds no pebble store"},
		{"bolt", empty, "holds no bolt store"},
		{"bolt", file, "not a directory"},
	} {
		code, _, stderr := runCmd(t, "", "inspect", "--backend", c.backend, "--dir", c.dir)
		if code != 1 || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, c.dir) {
			t.Errorf("inspect %s %s: exit %d, stderr %q; want 1 and %q", c.backend, c.dir, code, stderr, c.want)
		}
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("inspect wrote %d files into an empty directory", len(ents))
	}
	if _, err := os.Stat(filepath.Join(root, "missing")); err == nil {
		t.Error("inspect created the missing directory")
	}
}

// FuzzInspectRecord: describing any record, and printing it both ways,
// never panics, and says what it decoded.
func FuzzInspectRecord(f *testing.F) {
	key := engine.AppendKey(nil, "simulate", "u-1")
	for _, rec := range [][]byte{
		codec.AppendBucket(nil, codec.TagTokenBucket, codec.Bucket{Updated: 1_700_000_000e9, Level: 2e9}),
		codec.AppendBucket(nil, codec.TagLeakyBucket, codec.Bucket{Updated: -1, Level: math.MaxInt64}),
		codec.AppendWindow(nil, codec.Window{Start: math.MinInt64, Count: 3}),
		codec.AppendCounter(nil, codec.Counter{Start: 0, Count: 1, Previous: 2}),
		codec.AppendGCRA(nil, codec.GCRA{TAT: math.MaxInt64}),
		nil,
		{0x14},
	} {
		f.Add(key, rec, int64(1_700_000_060e9), int64(1_700_000_000e9))
	}
	f.Fuzz(func(t *testing.T, key, value []byte, expiresAt, now int64) {
		v := describeRecord(backend.Record{Key: key, Value: value, ExpiresAt: expiresAt}, now)
		if v.Raw != hex.EncodeToString(value) {
			t.Fatalf("raw %s, want the value's hex", v.Raw)
		}
		if v.State == nil && !v.Corrupt {
			t.Fatalf("no state but not corrupt: %+v", v)
		}
		if v.State != nil && v.Algorithm == "" {
			t.Fatalf("a decoded state without an algorithm: %+v", v)
		}
		if (expiresAt > 0) != (v.ExpiresAt != nil) || v.Expired && (expiresAt <= 0 || expiresAt > now) {
			t.Fatalf("expiry %d at %d: %+v", expiresAt, now, v)
		}
		js, err := json.Marshal(v)
		if err != nil || !json.Valid(js) {
			t.Fatalf("JSON: %s, %v", js, err)
		}
		var table bytes.Buffer
		p := newTablePrinter(&table)
		if err := p.print(v); err != nil {
			t.Fatal(err)
		}
		if err := p.flush(); err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(table.String(), "\n"); got != 2 {
			t.Fatalf("the table has %d lines, want a header and one row:\n%s", got, table.String())
		}
	})
}
