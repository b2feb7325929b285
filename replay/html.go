package replay

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// WriteHTML writes res to dir (made if need be): index.html, a
// self-contained page (inline SVG and CSS, no script, nothing fetched),
// and each of its plots as an SVG file of its own: denials.svg, and
// need-RULE.svg per rule (the rule's name with any character other than
// letters, digits, '-' and '_' written '_'), for documents to embed.
func WriteHTML(dir string, res *Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := map[string]string{}
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	title := "sluice replay: " + res.Report.Config
	if res.Against != nil {
		title += " against " + res.Against.Config
	}
	p("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>%s</title>\n", esc(title))
	p("<style>\nbody{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}\ntable{border-collapse:collapse;margin:0.5em 0 1.5em}\n" +
		"th,td{border-bottom:1px solid #ddd;padding:3px 10px;text-align:right}\nth:first-child,td:first-child{text-align:left}\n" +
		"code,pre{font-size:90%%}\n.bad{color:#a00}\nsvg{display:block;margin:0.5em 0 1.5em}\n</style>\n</head>\n<body>\n")
	p("<h1>%s</h1>\n", esc(title))

	// The logs read.
	var text bytes.Buffer
	tw := &errWriter{w: &text}
	writeFiles(tw, res)
	p("<h2>Logs</h2>\n<pre>%s</pre>\n", esc(text.String()))

	reports := []*Report{res.Report}
	if res.Against != nil {
		reports = append(reports, res.Against)
	}
	// Denials over time, every rule of both configurations.
	var lines []timeLine
	for k, r := range reports {
		for i := range r.Rules {
			rr := &r.Rules[i]
			name := rr.Name
			if len(reports) > 1 {
				name = fmt.Sprintf("%s (%s)", rr.Name, filepath.Base(r.Config))
			}
			lines = append(lines, timeLine{name: name, color: palette[i%len(palette)], dashed: k == 1, values: rr.DenialSeries})
		}
	}
	den := denialsSVG("Would-be denials over time", timeOrigin(res.Report.First), res.Report.Resolution, lines)
	files["denials.svg"] = den
	p("<h2>Denials over time</h2>\n%s", den)

	for k, r := range reports {
		p("<h2>%s (match %s)</h2>\n", esc(r.Config), esc(r.Mode))
		p("<p>%s requests from %s to %s: %s allowed, %s denied (%s), %s under no rule",
			num(r.Requests), stamp(r.First), stamp(r.Last), num(r.Allowed), num(r.Denied), pct(r.Denied, r.Requests), num(r.Unlimited))
		if r.BadIdentity > 0 {
			p(", %s refused for a bad identity", num(r.BadIdentity))
		}
		if r.Failed > 0 {
			p(", %s failed", num(r.Failed))
		}
		p(".</p>\n<table>\n<tr><th>rule</th><th>algorithm</th><th>limit</th><th>scope</th><th>requests</th><th>denied</th><th>share</th><th>callers</th><th>affected</th><th>never denied at limit</th><th>limit for %s</th></tr>\n", shareLabel(r.Share))
		for i := range r.Rules {
			rr := &r.Rules[i]
			name := rr.label()
			p("<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
				esc(name), esc(rr.Algorithm), esc(limitText(rr)), esc(rr.Scope), num(rr.Requests), num(rr.Denied), pct(rr.Denied, rr.Requests),
				num(int64(rr.Callers)), num(int64(rr.Affected)), pctf(rr.CoveredAtLimit, rr.Callers), needText(rr.SuggestedLimit, rr.Callers))
		}
		p("</table>\n")
		for i := range r.Rules {
			rr := &r.Rules[i]
			p("<h3>%s</h3>\n", esc(rr.Name))
			svg := needSVG(rr, r.Share)
			if k == 0 {
				files["need-"+fileName(rr.Name)+".svg"] = svg
			} else {
				files["against-need-"+fileName(rr.Name)+".svg"] = svg
			}
			p("%s", svg)
			if len(rr.Top) == 0 {
				p("<p>No caller denied.</p>\n")
				continue
			}
			p("<table>\n<tr><th>caller</th><th>denied</th><th>of requests</th><th>first denied</th><th>last denied</th><th>need</th></tr>\n")
			for _, c := range rr.Top {
				p("<tr><td><code>%s</code></td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
					esc(c.Key), num(c.Denied), num(c.Requests), stamp(c.FirstDenied), stamp(c.LastDenied), needText(c.Need, 1))
			}
			p("</table>\n")
		}
	}
	if d := res.Diff; d != nil {
		a, bn := res.Report.Config, res.Against.Config
		p("<h2>%s against %s</h2>\n", esc(a), esc(bn))
		p("<p>Denied by both: %s requests. Only by %s: %s requests of %s callers. Only by %s: %s requests of %s callers.</p>\n",
			num(d.BothDenied), esc(a), num(d.OnlyA), num(int64(d.AffectedOnlyA)), esc(bn), num(d.OnlyB), num(int64(d.AffectedOnlyB)))
		for _, side := range []struct {
			who, other string
			cs         []DiffCaller
		}{{a, bn, d.CallersOnlyA}, {bn, a, d.CallersOnlyB}} {
			if len(side.cs) == 0 {
				continue
			}
			p("<h3>Denied by %s, allowed by %s</h3>\n<table>\n<tr><th>rule</th><th>caller</th><th>requests</th></tr>\n", esc(side.who), esc(side.other))
			for _, c := range side.cs {
				p("<tr><td>%s</td><td><code>%s</code></td><td>%s</td></tr>\n", esc(c.Rule), esc(c.Key), num(c.Requests))
			}
			p("</table>\n")
		}
	}
	p("<h2>How the limits are computed</h2>\n<p>%s</p>\n", esc(needExplanation))
	p("</body>\n</html>\n")
	files["index.html"] = b.String()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// needExplanation is the report's account of a caller's need.
const needExplanation = "A caller's need under a rule is the smallest limit under which none of its requests would have been denied, " +
	"the rule's window kept (and a bucket's burst in proportion to its limit): for fixed_window the most it sent in one aligned window, " +
	"for sliding_log the most in any trailing window, for sliding_counter the largest weighted estimate at any of its requests, and for " +
	"token_bucket, leaky_bucket and gcra the least limit under which the algorithm itself, stepped through the caller's requests, admits " +
	"them all (found by bisection: a larger limit admits whatever a smaller one does). All of it is exact integer arithmetic at the " +
	"requests' logged times. A caller is never denied exactly when its need is at most the limit, so the limit that leaves a share q of the " +
	"callers never denied is the ceil(q·n)-th smallest need."

// fileName makes a rule's name safe as part of a file name.
func fileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}
