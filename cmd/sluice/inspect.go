package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/bolt"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/codec"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/internal/clip"
)

const inspectUsage = `Usage: sluice inspect --backend pebble|bolt --dir DIR [--namespace NS] [--key K]
       [--limit N] [--now TIME] [--json]
       sluice inspect --backend redis --redis-addr HOST:PORT[,HOST:PORT...] [--redis-prefix P --redis-timeout D] ...
       sluice inspect --config FILE ...

Inspect lists the rate-limit records a store holds, in key order: for each
one the rule's namespace, the caller key, the algorithm, the stored state in
human terms, when the record expires and how long that is from now.
Expired records a sweeper has not removed yet are listed too, as expired.
--config reads the store (backend, dir, or the redis section with its
password) from a gateway's configuration file; the flags override it.

With --key, a caller that has no record (never seen, expired or reset: its
budget is full) is said so on stderr, and the exit status is 1.

Stop the process using a Pebble or bbolt store first. Neither is opened
read-only: inspect opens the directory as the gateway does (with its sweeper
off, and it writes no record), so while a gateway or a simulate process holds
the directory inspect fails with the store's "locked" error and exit status 1.
A Redis store is listed while the fleet runs (SCAN under the key prefix, on
every primary of a Cluster): a listing, not a snapshot.

The table shows at most 300 bytes of a namespace or a key (every key a
gateway makes is shorter): a longer one is cut and followed by its length
and the first 16 hex digits of its SHA-256, so that two long keys are
still two rows told apart; --json shows every key whole.

The stored state is shown as it was last written: a bucket's level is the
level at its "updated" time, before any refill or drain since, and a sliding
log counts every entry it holds, including those that have aged out since.

With --json each record is one JSON object on its own line (wrapped here):

	{"namespace":"api","key":"u-1","algorithm":"token_bucket",
	 "state":{"level":2,"updated_at":"2023-11-14T22:13:20Z"},
	 "expires_at":"2023-11-14T22:13:21.2Z","ttl_seconds":1.2,"expired":false,
	 "corrupt":false,"raw":"11..."}

A record that does not decode is listed with "corrupt":true, "state":null, the
decoder's "error", and its bytes in hex ("raw"). Exit status: 0 when every
record was listed, 2 for a usage error (the flag is named), 1 when the store
cannot be opened or read.

Flags:
`

// defaultInspectLimit is --limit's default.
const defaultInspectLimit = 100

// inspectFlags are inspect's parsed command line.
type inspectFlags struct {
	backend   string
	dir       string
	redis     config.Redis // with backend redis
	namespace string       // with hasNS: list only this rule's records
	hasNS     bool
	key       string // with hasKey: list only this caller's records
	hasKey    bool
	config    string // --config: the configuration file to read the store from
	limit     int    // at most this many records; 0 means all
	now       int64  // Unix ns the TTLs are measured from
	json      bool
}

// rangeStore is a store inspect can list: a backend.Durable or a
// backend.Swapper.
type rangeStore interface {
	backend.Backend
	Range(start []byte, fn func(r backend.Record) bool) error
}

// runInspect is the inspect command.
func runInspect(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f, err := parseInspectFlags(args, time.Now())
	if errors.Is(err, flag.ErrHelp) {
		printInspectUsage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice inspect: %v\nRun 'sluice inspect -h' for usage.\n", err)
		return 2
	}
	s, err := openInspectStore(f)
	if err != nil {
		fmt.Fprintf(stderr, "sluice inspect: %v\n", err)
		if errors.Is(err, backend.ErrCorrupt) {
			fmt.Fprint(stderr, damagedHint(f.dir))
		}
		if errors.Is(err, backend.ErrLocked) {
			fmt.Fprintf(stderr, "sluice inspect: stop the gateway or simulate process using %s, then inspect it\n", f.dir)
		}
		return 1
	}
	listed, err := inspect(s, f, stdout, stderr)
	if cerr := s.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing the store: %w", cerr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice inspect: %v\n", err)
		if errors.Is(err, backend.ErrCorrupt) {
			fmt.Fprint(stderr, damagedHint(f.dir))
		}
		return 1
	}
	if f.hasKey && listed == 0 {
		// As reset says it: a caller with no record has its whole budget.
		fmt.Fprintf(stderr, "sluice inspect: no record of %s: it has none (never seen, expired or reset), so its budget is full\n", identity.ShowKey(f.key))
		return 1
	}
	return 0
}

// damagedHint tells an operator how to recover from a damaged store in dir.
func damagedHint(dir string) string {
	return fmt.Sprintf("sluice inspect: the store in %s is damaged; the records listed above (if any) read correctly. To recover, stop the gateway, move %s away and start it again: it starts with an empty store, so every caller's budget is full again once\n", dir, dir)
}

func newInspectFlags() (*flag.FlagSet, *inspectFlags, *string) {
	f := &inspectFlags{redis: defaultRedis()}
	fs := flag.NewFlagSet("sluice inspect", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by runInspect
	fs.Usage = func() {}
	fs.StringVar(&f.backend, "backend", "", "the `store`: pebble, bolt or redis (required, unless --config names it)")
	fs.StringVar(&f.dir, "dir", "", "the state `directory` of a pebble or bolt store (required for them)")
	addRedisFlags(fs, &f.redis, func(_ string, set func(string) error) func(string) error { return set })
	fs.StringVar(&f.config, "config", "", "read the store section of this gateway configuration `file`; the flags override it")
	fs.StringVar(&f.namespace, "namespace", "", "list only the records of this rule `namespace` (simulate uses \"simulate\")")
	fs.StringVar(&f.key, "key", "", "list only the records of this caller `key`, in any namespace: user:ID, key:API_KEY (hashed as the gateway hashes it), keyhash:HEX, ip:ADDRESS, global or {TENANT}KEY (a level's within its tenant, as listed), or a key of another kind as stored")
	fs.IntVar(&f.limit, "limit", defaultInspectLimit, "list at most `N` records; 0 lists them all")
	now := fs.String("now", "", "measure TTLs from this `time` (RFC 3339, such as 2023-11-14T22:13:20Z) instead of the wall clock")
	fs.BoolVar(&f.json, "json", false, "print one JSON object per record per line instead of a table")
	return fs, f, now
}

func printInspectUsage(w io.Writer) {
	fs, _, _ := newInspectFlags()
	fmt.Fprint(w, inspectUsage)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// parseInspectFlags parses inspect's command line; wallNow is the default
// for --now. Every error names the flag at fault.
func parseInspectFlags(args []string, wallNow time.Time) (inspectFlags, error) {
	fs, f, now := newInspectFlags()
	if err := parseFlags(fs, args); err != nil {
		return inspectFlags{}, err
	}
	if fs.NArg() > 0 {
		return inspectFlags{}, usagef("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	idCfg := identity.Config{}
	if f.config != "" {
		cfg, err := config.Load(f.config)
		if err != nil {
			return inspectFlags{}, usagef("--config: %v", err)
		}
		idCfg = cfg.Identity
		file := inspectFlags{backend: cfg.Store.Backend, dir: cfg.Store.Dir, redis: cfg.Store.Redis}
		if set["backend"] && f.backend != file.backend {
			file = inspectFlags{backend: f.backend, redis: defaultRedis()} // the file's store is another
		}
		if set["dir"] {
			file.dir = f.dir
		}
		if set["redis-addr"] {
			file.redis.Addrs = f.redis.Addrs
		}
		if set["redis-prefix"] {
			file.redis.KeyPrefix = f.redis.KeyPrefix
		}
		if set["redis-timeout"] {
			file.redis.Timeout = f.redis.Timeout
		}
		if set["redis-breaker"] {
			file.redis.Breaker = f.redis.Breaker
		}
		f.backend, f.dir, f.redis = file.backend, file.dir, file.redis
	}
	if !set["redis-timeout"] {
		f.redis.Timeout = inspectRedisTimeout // a scan, not a gateway's decision
	}
	switch f.backend {
	case "pebble", "bolt", "redis":
	case "":
		return inspectFlags{}, usagef("--backend: required (pebble, bolt or redis)")
	case "memory":
		return inspectFlags{}, usagef("--backend memory: the memory backend keeps nothing to inspect")
	default:
		return inspectFlags{}, usagef("--backend %s: unknown backend (want pebble, bolt or redis)", f.backend)
	}
	for _, name := range redisFlags {
		if set[name] && f.backend != "redis" {
			return inspectFlags{}, usagef("--%s: only with --backend redis (the store is %s)", name, f.backend)
		}
	}
	switch {
	case f.backend == "redis" && f.dir != "":
		return inspectFlags{}, usagef("--dir: the redis backend keeps nothing on disk (give --redis-addr)")
	case f.backend == "redis" && len(f.redis.Addrs) == 0:
		return inspectFlags{}, usagef("--redis-addr: required with --backend redis")
	case f.backend != "redis" && f.dir == "":
		return inspectFlags{}, usagef("--dir: required")
	}
	if f.limit < 0 {
		return inspectFlags{}, usagef("--limit: must be 0 (all) or more, got %d", f.limit)
	}
	f.hasNS, f.hasKey = set["namespace"], set["key"]
	if f.hasKey {
		// A caller key as the gateway counts it (key:API_KEY hashed,
		// keyhash:HEX, user:ID, ip:ADDRESS, {TENANT}KEY within a tenant);
		// a key of another kind (a library's or simulate's own) is looked
		// up as written.
		id, err := identity.New(idCfg)
		if err != nil {
			return inspectFlags{}, usagef("--config: identity: %v", err)
		}
		if kind, _, _ := strings.Cut(f.key, ":"); kind == "user" || kind == "key" || kind == "keyhash" || kind == "ip" || f.key == "global" || strings.HasPrefix(f.key, "{") {
			if f.key, err = id.ParseKey(f.key); err != nil {
				return inspectFlags{}, usagef("--key: %v", err)
			}
		}
	}
	t := wallNow
	if set["now"] {
		var err error
		if t, err = time.Parse(time.RFC3339Nano, *now); err != nil {
			return inspectFlags{}, usagef("--now %s: want an RFC 3339 time such as 2023-11-14T22:13:20Z", *now)
		}
	}
	// UnixNano is defined only between these two instants.
	if t.Before(time.Unix(0, math.MinInt64)) || t.After(time.Unix(0, math.MaxInt64)) {
		return inspectFlags{}, usagef("--now %s: outside the years 1678 to 2262", *now)
	}
	f.now = t.UnixNano()
	return *f, nil
}

// inspectRedisTimeout is each Redis call's deadline under inspect, unless
// --redis-timeout says otherwise.
const inspectRedisTimeout = 5 * time.Second

// openInspectStore opens the store f names: a Pebble or bbolt directory
// without its sweeper, or Redis. It refuses a directory that holds no store
// rather than create an empty one there, as the backends' Open would.
func openInspectStore(f inspectFlags) (rangeStore, error) {
	if f.backend == "redis" {
		setRedisLogger(nil) // a failure is reported once, by the error
		return openRedis(f.redis, redisOptions(f.redis, false))
	}
	if err := checkStoreDir(f.backend, f.dir); err != nil {
		return nil, err
	}
	if f.backend == "bolt" {
		// A gateway holding the file makes Open fail after its short lock
		// timeout with an error naming the directory.
		return bolt.Open(f.dir, &bolt.Options{SweepInterval: -1})
	}
	// Inspect writes nothing, so the log syncer has nothing to do.
	return pebble.Open(f.dir, &pebble.Options{SweepInterval: -1, SyncInterval: -1})
}

// checkStoreDir reports, for the commands that work on an existing store
// (inspect, reset), a directory that holds no store of the named backend
// ("pebble" or "bolt"), which the backends' Open would create an empty
// store in: a mistyped --dir is an error, not an empty store.
func checkStoreDir(name, dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("--dir %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("--dir %s: not a directory", dir)
	}
	if name == "bolt" {
		if _, err := os.Stat(filepath.Join(dir, bolt.FileName)); err != nil {
			return fmt.Errorf("--dir %s holds no bolt store (no %s): %w", dir, bolt.FileName, err)
		}
		return nil
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*")); len(m) == 0 {
		return fmt.Errorf("--dir %s holds no pebble store (no MANIFEST file)", dir)
	}
	return nil
}

// inspect lists the records of s that f selects to out, and reports on
// errOut when --limit left some out. It returns how many it listed.
func inspect(s rangeStore, f inspectFlags, out, errOut io.Writer) (int, error) {
	var start, prefix []byte
	if f.hasNS {
		prefix = engine.AppendKey(nil, f.namespace, "")
		start = prefix
		if f.hasKey {
			start = engine.AppendKey(nil, f.namespace, f.key)
		}
	}
	var p recordPrinter
	if f.json {
		p = newJSONPrinter(out)
	} else {
		p = newTablePrinter(out)
	}
	listed, more := 0, false
	var werr error
	err := s.Range(start, func(r backend.Record) bool {
		// Keys are in order: past the namespace, or past the one key
		// both filters name, nothing further can match.
		if prefix != nil && !bytes.HasPrefix(r.Key, prefix) || f.hasNS && f.hasKey && !bytes.Equal(r.Key, start) {
			return false
		}
		if f.hasNS || f.hasKey {
			ns, key, ok := engine.SplitKey(r.Key)
			if !ok || (f.hasNS && ns != f.namespace) || (f.hasKey && key != f.key) {
				return true
			}
		}
		if f.limit > 0 && listed == f.limit {
			more = true
			return false
		}
		listed++
		if werr = p.print(describeRecord(r, f.now)); werr != nil {
			return false
		}
		return true
	})
	if ferr := p.flush(); werr == nil {
		werr = ferr
	}
	if err != nil {
		return listed, fmt.Errorf("reading the store: %w", err)
	}
	if werr != nil {
		return listed, fmt.Errorf("writing: %w", werr)
	}
	if more {
		fmt.Fprintf(errOut, "sluice inspect: listed the first %d records; --limit 0 lists them all\n", listed)
	}
	return listed, nil
}

// recordView is one record as inspect shows it. Its JSON form is a line of
// inspect --json; the field names are stable.
type recordView struct {
	// Namespace and Key are the rule's namespace and the caller key.
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
	// KeyHex is the stored key in hex when Namespace and Key do not show
	// it faithfully: it does not split (Corrupt is then set) or is not
	// valid UTF-8.
	KeyHex string `json:"key_hex,omitempty"`
	// Algorithm is the name the record's tag stands for; empty when the
	// record is too short to have a tag, or its tag is unknown.
	Algorithm string `json:"algorithm"`
	// State is the decoded state; nil when the record does not decode.
	State *stateView `json:"state"`
	// ExpiresAt is the record's expiry (RFC 3339, UTC); nil means never.
	ExpiresAt *string `json:"expires_at"`
	// TTLSeconds is the exact seconds from now until ExpiresAt, 0 once
	// expired; nil means never.
	TTLSeconds *json.Number `json:"ttl_seconds"`
	// Expired reports that the expiry is not after now.
	Expired bool `json:"expired"`
	// Corrupt reports a record that does not decode (or a key that does
	// not split); Error says why.
	Corrupt bool   `json:"corrupt"`
	Error   string `json:"error,omitempty"`
	// Raw is the stored record in hex.
	Raw string `json:"raw"`

	ttl time.Duration // for the table: until expiry, clamped; valid when ExpiresAt is set and not Expired
}

// stateView is a decoded record: its fields as the codec describes them
// (codec.Describe), in the codec's order. In JSON it is an object of
// them: times as RFC 3339 strings with nanoseconds in UTC, counts as
// integers, amounts (a bucket's level or spent tokens, in billionths) as
// exact decimals of tokens.
type stateView struct {
	fields []stateField
}

// stateField is one field of a stateView: its JSON name, its table label
// and its value as JSON text (quoted for a time).
type stateField struct {
	name, label, text string
	quoted            bool
}

// newStateView renders the codec's fields.
func newStateView(fields []codec.Field) stateView {
	v := stateView{fields: make([]stateField, len(fields))}
	for i, f := range fields {
		sf := stateField{name: f.Name, label: f.Label}
		switch f.Kind {
		case codec.Time:
			sf.text, sf.quoted = formatTime(f.Value), true
		case codec.Amount:
			sf.text = string(appendSeconds(nil, f.Value)) // billionths, as seconds are nanoseconds
		default:
			sf.text = strconv.FormatInt(f.Value, 10)
		}
		v.fields[i] = sf
	}
	return v
}

// get returns the named field's value as text (unquoted), or "".
func (v *stateView) get(name string) string {
	for _, f := range v.fields {
		if f.name == name {
			return f.text
		}
	}
	return ""
}

// has reports whether the record has the named field.
func (v *stateView) has(name string) bool {
	for _, f := range v.fields {
		if f.name == name {
			return true
		}
	}
	return false
}

// MarshalJSON writes the fields as one object, in order.
func (v stateView) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, f := range v.fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, f.name)
		b = append(b, ':')
		if f.quoted {
			b = strconv.AppendQuote(b, f.text)
		} else {
			b = append(b, f.text...)
		}
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads an object MarshalJSON wrote, keeping its order (for
// programs and tests that read inspect's output back).
func (v *stateView) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return fmt.Errorf("state: want an object")
	}
	v.fields = v.fields[:0]
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return err
		}
		val, err := dec.Token()
		if err != nil {
			return err
		}
		f := stateField{name: fmt.Sprint(k)}
		switch x := val.(type) {
		case string:
			f.text, f.quoted = x, true
		case json.Number:
			f.text = x.String()
		default:
			return fmt.Errorf("state: field %s: want a string or a number", f.name)
		}
		v.fields = append(v.fields, f)
	}
	_, err := dec.Token()
	return err
}

// describeRecord decodes r for display, with its TTL measured from now. It
// never panics, whatever bytes r holds.
func describeRecord(r backend.Record, now int64) recordView {
	var v recordView
	v.Raw = hex.EncodeToString(r.Value)
	ns, key, ok := engine.SplitKey(r.Key)
	switch {
	case !ok:
		v.KeyHex = hex.EncodeToString(r.Key)
		v.Corrupt, v.Error = true, "key is not a namespaced key"
	case !utf8.ValidString(ns) || !utf8.ValidString(key):
		v.KeyHex = hex.EncodeToString(r.Key)
		fallthrough
	default:
		v.Namespace, v.Key = ns, identity.ShowKey(key)
	}
	if r.ExpiresAt > 0 {
		exp := formatTime(r.ExpiresAt)
		v.ExpiresAt = &exp
		left := json.Number("0")
		if r.ExpiresAt > now {
			// Exact even when now is far before 1970: the difference of
			// two int64s fits a uint64.
			d := min(uint64(r.ExpiresAt)-uint64(now), math.MaxInt64)
			v.ttl = time.Duration(d)
			left = json.Number(appendSeconds(nil, int64(d)))
		} else {
			v.Expired = true
		}
		v.TTLSeconds = &left
	}
	state, alg, err := decodeState(r.Value)
	v.Algorithm = alg
	if err != nil {
		v.Corrupt = true
		if v.Error != "" {
			v.Error += "; "
		}
		v.Error += err.Error()
		return v
	}
	v.State = &state
	return v
}

// decodeState decodes a record of any algorithm, naming the algorithm its
// tag stands for (empty when it has none).
func decodeState(rec []byte) (stateView, string, error) {
	name, fields, err := codec.Describe(rec)
	if err != nil {
		return stateView{}, name, err
	}
	return newStateView(fields), name, nil
}

// formatTime formats Unix nanoseconds as RFC 3339 with nanoseconds, in UTC.
func formatTime(ns int64) string {
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}

// recordPrinter writes listed records in one of inspect's formats.
type recordPrinter interface {
	print(v recordView) error
	flush() error
}

// jsonPrinter writes one JSON object per record per line.
type jsonPrinter struct{ enc *json.Encoder }

func newJSONPrinter(w io.Writer) *jsonPrinter {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &jsonPrinter{enc: enc}
}

func (p *jsonPrinter) print(v recordView) error { return p.enc.Encode(v) }
func (p *jsonPrinter) flush() error             { return nil }

// tablePrinter writes an aligned table. Columns are aligned within blocks
// of tableBlock rows, so that listing a large store does not hold every row
// in memory.
type tablePrinter struct {
	tw   *tabwriter.Writer
	rows int
}

const tableBlock = 1000

// maxTableRaw bounds the bytes of a corrupt record the table shows in hex.
const maxTableRaw = 32

// maxTableText bounds the bytes of a namespace or a key the table shows:
// every key a gateway's door makes is shorter (identity.MaxKeyLen), and a
// longer one, which a store can hold, would otherwise pad every row of its
// block to its width. --json shows every key whole.
const maxTableText = 300

func newTablePrinter(w io.Writer) *tablePrinter {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	return &tablePrinter{tw: tw}
}

func (p *tablePrinter) print(v recordView) error {
	if p.rows%tableBlock == 0 {
		if p.rows > 0 {
			if err := p.tw.Flush(); err != nil {
				return err
			}
		}
		fmt.Fprintln(p.tw, "NAMESPACE\tKEY\tALGORITHM\tSTATE\tEXPIRES\tTTL")
	}
	p.rows++
	ns, key := tableCell(v.Namespace), tableCell(v.Key)
	if v.KeyHex != "" {
		key += " (hex " + clip.Distinct(v.KeyHex, 2*maxTableText) + ")"
	}
	alg := v.Algorithm
	if alg == "" {
		alg = "?"
	}
	expires, ttl := "never", "-"
	if v.ExpiresAt != nil {
		expires = *v.ExpiresAt
		ttl = "expired"
		if !v.Expired {
			// To the millisecond, as a person reads it (--json has it exact).
			ttl = v.ttl.Round(time.Millisecond).String()
			if v.ttl < time.Millisecond {
				ttl = v.ttl.String()
			}
		}
	}
	_, err := fmt.Fprintf(p.tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ns, key, alg, stateText(v), expires, ttl)
	return err
}

func (p *tablePrinter) flush() error {
	if p.rows == 0 {
		return nil
	}
	return p.tw.Flush()
}

// stateText is a record's STATE column.
func stateText(v recordView) string {
	if v.State == nil {
		raw := v.Raw
		if len(raw) > 2*maxTableRaw {
			raw = fmt.Sprintf("%s… (%d bytes)", raw[:2*maxTableRaw], len(raw)/2)
		}
		return "corrupt: " + v.Error + "; raw " + raw
	}
	var parts []string
	add := func(name, value string) { parts = append(parts, name+"="+value) }
	for _, f := range v.State.fields {
		add(f.label, f.text)
	}
	if v.Corrupt { // a record that decodes under a key that does not split
		add("corrupt", strconv.Quote(v.Error))
	}
	return strings.Join(parts, " ")
}

// tableCell returns s as a table cell (tableText), its first maxTableText
// bytes when it is longer, followed by its length and fingerprint
// (clip.Tail): a cut key reads as no whole key does, and two cut keys
// differ.
func tableCell(s string) string {
	if len(s) <= maxTableText {
		return tableText(s)
	}
	return tableText(clip.Head(s, maxTableText)) + clip.Tail(s, true)
}

// tableText returns s as a table cell: as it is when it is printable and has
// no spaces, quoted (Go syntax) otherwise, so that no key can break the
// table's alignment or pass for another.
func tableText(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if r == utf8.RuneError || r == '"' || r == '\\' || !unicode.IsGraphic(r) || unicode.IsSpace(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
