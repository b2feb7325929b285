package replay

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes res as a terminal report: the files read, the bad lines
// shown, and per rule its requests, denials, callers affected, the
// callers' needs and the top callers by denials; with a second
// configuration, both side by side and who is denied by one only.
func WriteText(w io.Writer, res *Result) error {
	ew := &errWriter{w: w}
	writeFiles(ew, res)
	writeReport(ew, res.Report)
	if res.Against != nil {
		writeReport(ew, res.Against)
		writeDiff(ew, res)
	}
	return ew.err
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return len(p), nil
	}
	_, e.err = e.w.Write(p)
	return len(p), nil
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }

func writeFiles(w *errWriter, res *Result) {
	var lines, bad, reordered, late int64
	var maxLate time.Duration
	for _, f := range res.Files {
		lines += f.Lines
		bad += f.Bad
		reordered += f.Reordered
		late += f.Late
		maxLate = max(maxLate, f.MaxLate)
	}
	w.printf("Read %s: %s lines, %s that did not parse.\n", plural(len(res.Files), "log file"), num(lines), num(bad))
	for _, f := range res.Files {
		kind := f.Format
		if f.Gzip {
			kind += ", gzip"
		}
		w.printf("  %s (%s): %s lines, %s bad, %s reordered, %s late\n", f.Name, kind, num(f.Lines), num(f.Bad), num(f.Reordered), num(f.Late))
		if f.Err != nil {
			w.printf("    stopped early: %v\n", f.Err)
		}
	}
	if res.Reorder < 0 {
		w.printf("Lines were decided in file order (no reorder window).\n")
	} else {
		w.printf("Out of order lines: %s put back in time order (reorder window %v)", num(reordered), time.Duration(res.Reorder))
		if late > 0 {
			w.printf("; %s older than the window, decided at the time of the line before them (up to %v late)", num(late), maxLate)
		}
		w.printf(".\n")
	}
	if len(res.BadLines) > 0 {
		w.printf("\nLines that did not parse (the first %d of %s):\n", len(res.BadLines), num(bad))
		for _, b := range res.BadLines {
			w.printf("  %s:%d: %s\n      %s\n", b.File, b.Line, b.Err, strconv.Quote(b.Text))
		}
	}
}

func writeReport(w *errWriter, r *Report) {
	w.printf("\n== %s (match %s)\n", r.Config, r.Mode)
	if r.Requests == 0 {
		w.printf("No requests.\n")
		return
	}
	w.printf("%s requests from %s to %s (%v): %s allowed, %s denied (%s), %s under no rule",
		num(r.Requests), stamp(r.First), stamp(r.Last), time.Duration(r.Last-r.First).Round(time.Second),
		num(r.Allowed), num(r.Denied), pct(r.Denied, r.Requests), num(r.Unlimited))
	if r.ShadowDenied > 0 {
		w.printf(", %s would have been denied by shadow rules (%s)", num(r.ShadowDenied), pct(r.ShadowDenied, r.Requests))
	}
	if r.BadIdentity > 0 {
		w.printf(", %s refused for a bad identity (400)", num(r.BadIdentity))
	}
	if r.Failed > 0 {
		w.printf(", %s failed (500: a cost over a rule's capacity)", num(r.Failed))
	}
	w.printf(".\n\n")
	q := shareLabel(r.Share)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "rule\talgorithm\tlimit\tscope\trequests\tdenied\tshare\tcallers\taffected\tnever denied at limit\tlimit for %s\t\n", q)
	for i := range r.Rules {
		rr := &r.Rules[i]
		name := rr.label()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, rr.Algorithm, limitText(rr), rr.Scope,
			num(rr.Requests), num(rr.Denied), pct(rr.Denied, rr.Requests), num(int64(rr.Callers)), num(int64(rr.Affected)),
			pctf(rr.CoveredAtLimit, rr.Callers), needText(rr.SuggestedLimit, rr.Callers))
	}
	tw.Flush()
	for i := range r.Rules {
		rr := &r.Rules[i]
		if len(rr.Top) == 0 {
			continue
		}
		w.printf("\nTop callers denied by %s:\n", rr.Name)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  caller\tdenied\tof requests\tfirst denied\tlast denied\tneed\n")
		for _, c := range rr.Top {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", c.Key, num(c.Denied), num(c.Requests), stamp(c.FirstDenied), stamp(c.LastDenied), needText(c.Need, 1))
		}
		tw.Flush()
	}
}

func writeDiff(w *errWriter, res *Result) {
	d, a, b := res.Diff, res.Report.Config, res.Against.Config
	w.printf("\n== %s against %s\n", a, b)
	w.printf("Denied by both: %s requests. Only by %s: %s requests of %s callers. Only by %s: %s requests of %s callers.\n",
		num(d.BothDenied), a, num(d.OnlyA), num(int64(d.AffectedOnlyA)), b, num(d.OnlyB), num(int64(d.AffectedOnlyB)))
	list := func(who, other string, cs []DiffCaller) {
		if len(cs) == 0 {
			return
		}
		w.printf("\nDenied by %s, allowed by %s:\n", who, other)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  rule\tcaller\trequests\n")
		for _, c := range cs {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Rule, c.Key, num(c.Requests))
		}
		tw.Flush()
	}
	list(a, b, d.CallersOnlyA)
	list(b, a, d.CallersOnlyB)
}

// limitText is a rule's limit as the configuration says it: "100/1m",
// "10/1s burst 50".
func limitText(rr *RuleReport) string {
	s := strconv.FormatInt(rr.Limit, 10) + "/" + durText(rr.Window)
	if rr.Calendar != "" {
		s = strconv.FormatInt(rr.Limit, 10) + " per " + rr.Calendar
	}
	if rr.Burst > 0 {
		s += " burst " + strconv.FormatInt(rr.Burst, 10)
	}
	if rr.Cost > 1 {
		s += " cost " + strconv.FormatInt(rr.Cost, 10)
	}
	return s
}

// durText writes a duration without trailing zero units: 1m, 1h30m, 500ms.
func durText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func needText(n int64, callers int) string {
	switch {
	case callers == 0:
		return "-"
	case n == Unbounded:
		return "none valid"
	}
	return num(n)
}

// shareLabel writes a share as a percentage: 99%, 99.9%.
func shareLabel(q float64) string {
	return strconv.FormatFloat(q*100, 'f', -1, 64) + "%"
}

func stamp(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05Z")
}

func pct(n, of int64) string {
	if of == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(n)/float64(of), 'f', 2, 64) + "%"
}

func pctf(f float64, callers int) string {
	if callers == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*f, 'f', 2, 64) + "%"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// num writes n with thousands separated by commas.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
