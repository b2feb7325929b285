package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/replay"
)

const replayUsage = `Usage: sluice replay --config RULES.yaml --log FILE [--log FILE...]
       [--format auto|combined|json] [--combined-extra FIELDS] [--json-fields MAP]
       [--report DIR] [--against OTHER.yaml] [--share 0.99] [--top 10]
       [--reorder 10s] [--progress]

Replay decides an access log under a rules file as sluice serve would have
decided it, standing where the logging proxy stood: the same rules,
matching, caller keys (the identity section: headers, trusted proxies and
X-Forwarded-For) and algorithms, on a clock set to each line's time. It
reports per rule the requests, the would-be denials and whom they hit, and
the smallest limit under which a share of callers (--share) would never
have been denied, computed exactly from each caller's peak use.

Logs: the nginx/Apache combined format, or JSON lines (told apart by the
first byte with --format auto); gzip files are read as they are. Lines that
do not parse are counted and the first few shown; they never stop a
replay. Lines out of time order (nginx writes a line when the request
ends) are put back in order within --reorder; an older line is decided at
the time of the line before it and counted late.

Combined format fields after the user agent (--combined-extra, in order):
  xff           $http_x_forwarded_for (read from trusted proxies, as serve does)
  forwarded     $http_forwarded
  user          the user id (say $upstream_http_x_user_id), over $remote_user
  apikey        the API key ($http_x_api_key)
  plan          the plan header ($http_x_plan; read from trusted proxies, as serve does)
  msec          $msec, a finer time than $time_local
  request_time  $request_time, subtracted to give the request's start
  -             a field to skip

JSON keys (--json-fields meaning=key|key,...; a key may be a dotted path):
  ` + "%s" + `

Exit status: 2 for a usage error or an invalid rules file; 1 when a log
cannot be opened or the report not written, and when no line of the logs
parsed or more than --max-bad of them did not (the report is printed all
the same); 0 otherwise.

Flags:
`

// listFlag is a flag given once per value.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// runReplay is the replay command.
func runReplay(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "the rules `file` (YAML), as serve reads it; required")
	var logs listFlag
	fs.Var(&logs, "log", "an access log `file`, plain or gzip; repeat for several (merged in time order); required")
	format := fs.String("format", replay.FormatAuto, "the logs' `format`: auto, combined or json")
	extra := fs.String("combined-extra", "", "the `fields` appended to the combined format, in order, such as xff,user")
	fields := fs.String("json-fields", "", "JSON keys by meaning over the defaults, such as `time=ts,ip=client`")
	reportDir := fs.String("report", "", "write an HTML report with SVG plots to `DIR`")
	against := fs.String("against", "", "a second rules `file` to compare: who is denied by one and not the other")
	share := fs.Float64("share", 0.99, "the `share` of callers the suggested limit leaves never denied, above 0 and at most 1")
	top := fs.Int("top", 10, "how many `callers` each list shows")
	reorder := fs.Duration("reorder", replay.DefaultReorder, "how far out of time order lines may be and still be decided in order; 0 for none")
	keepBad := fs.Int("bad-lines", 5, "how many lines that did not parse to show")
	maxBad := fs.Float64("max-bad", defaultMaxBad, "the largest `share` of lines that may fail to parse, 0 to 1; above it (or when no line parses) the report is still printed and replay exits 1")
	progress := fs.Bool("progress", false, "show a progress bar on stderr even when it is not a terminal")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), replayUsage, replay.DefaultFieldMap.String())
		fs.PrintDefaults()
	}
	if status, done := parseArgs(fs, args, stdout); done {
		return status
	}
	fail := failer(stderr, "sluice replay")
	switch {
	case fs.NArg() > 0:
		return fail(2, "unexpected argument %q", fs.Arg(0))
	case *configPath == "":
		return fail(2, "--config is required")
	case len(logs) == 0:
		return fail(2, "--log is required")
	case !(*share > 0 && *share <= 1):
		return fail(2, "--share: want a share above 0 and at most 1, such as 0.99, got %v", *share)
	case *top < 0:
		return fail(2, "--top: want 0 or more, got %d", *top)
	case *reorder < 0:
		return fail(2, "--reorder: want 0 or more, got %v", *reorder)
	case !(*maxBad >= 0 && *maxBad <= 1):
		return fail(2, "--max-bad: want a share from 0 to 1, such as 0.01, got %v", *maxBad)
	}
	opts := replay.SourceOptions{Format: *format, Reorder: *reorder}
	if *reorder == 0 {
		opts.Reorder = -1
	}
	switch *format {
	case replay.FormatAuto, replay.FormatCombined, replay.FormatJSON:
	default:
		return fail(2, "--format: want auto, combined or json, got %q", *format)
	}
	var err error
	if opts.Extra, err = replay.ParseCombinedExtras(*extra); err != nil {
		return fail(2, "--combined-extra: %v", err)
	}
	if opts.Fields, err = replay.ParseFieldMap(*fields); err != nil {
		return fail(2, "--json-fields: %v", err)
	}
	if _, err := replay.NewJSONParser(opts.Fields); err != nil {
		return fail(2, "--json-fields: %v", err)
	}

	load := func(path string) (*replay.Replayer, int) {
		cfg, err := config.Load(path)
		if err != nil {
			return nil, fail(2, "%v", err) // names file:line and the field
		}
		r, err := replay.New(path, cfg)
		if err != nil {
			return nil, fail(2, "%v", err)
		}
		return r, 0
	}
	a, status := load(*configPath)
	if a == nil {
		return status
	}
	defer a.Close()
	var b *replay.Replayer
	if *against != "" {
		if b, status = load(*against); b == nil {
			return status
		}
		defer b.Close()
	}

	var sources []*replay.Source
	var total int64
	for _, name := range logs {
		s, err := replay.Open(name, opts, *keepBad)
		if err != nil {
			for _, s := range sources {
				s.Close()
			}
			return fail(1, "%v", err)
		}
		defer s.Close()
		if fi, err := os.Stat(name); err == nil {
			total += fi.Size()
		}
		sources = append(sources, s)
	}
	runOpts := replay.RunOptions{Share: *share, Top: *top}
	var bar *progressBar
	if *progress || isTerminal(stderr) {
		bar = &progressBar{w: stderr, total: total, last: -1}
		runOpts.Progress = bar.update
	}
	res := replay.Run(sources, a, b, runOpts)
	if bar != nil {
		bar.done()
	}
	// Bad lines shown once, across the files, as many as asked for.
	if len(res.BadLines) > *keepBad {
		res.BadLines = res.BadLines[:*keepBad]
	}
	if err := replay.WriteText(stdout, res); err != nil {
		return fail(1, "writing the report: %v", err)
	}
	if *reportDir != "" {
		if err := replay.WriteHTML(*reportDir, res); err != nil {
			return fail(1, "--report: %v", err)
		}
		fmt.Fprintf(stdout, "\nReport written to %s\n", *reportDir)
	}
	var lines, bad int64
	for _, f := range res.Files {
		lines, bad = lines+f.Lines, bad+f.Bad
	}
	switch {
	case lines == bad:
		given := "--format " + *format
		if *format == replay.FormatAuto {
			given += ", which read them as " + formatsOf(res.Files)
		}
		return fail(1, "no line of the logs parsed (%d lines, %d bad): nothing was replayed; check --format (given: %s) and, for JSON, --json-fields", lines, bad, given)
	case float64(bad) > *maxBad*float64(lines):
		return fail(1, "%d of %d lines did not parse (%.1f%%), more than --max-bad allows (%g%%): the report leaves them out", bad, lines, 100*float64(bad)/float64(lines), 100**maxBad)
	}
	return 0
}

// defaultMaxBad is --max-bad's default: a log with more lines that do not
// parse is most likely read in the wrong format.
const defaultMaxBad = 0.01

// formatsOf names the formats the files were read as.
func formatsOf(files []replay.FileStats) string {
	var names []string
	for _, f := range files {
		if !slices.Contains(names, f.Format) {
			names = append(names, f.Format)
		}
	}
	return strings.Join(names, ", ")
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar draws the share of the logs read on one line, redrawn when
// the whole percentage changes.
type progressBar struct {
	w     io.Writer
	total int64
	last  int // the percentage drawn, -1 before the first
}

func (p *progressBar) update(read int64) {
	pc := 100
	if p.total > 0 {
		pc = int(min(100, read*100/p.total))
	}
	if pc == p.last {
		return
	}
	p.last = pc
	const width = 40
	fill := pc * width / 100
	fmt.Fprintf(p.w, "\rreplaying [%s%s] %3d%%", strings.Repeat("#", fill), strings.Repeat(" ", width-fill), pc)
}

func (p *progressBar) done() {
	if p.last < 0 {
		return
	}
	fmt.Fprintf(p.w, "\n")
}
