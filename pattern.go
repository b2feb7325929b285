package sluice

import (
	"fmt"
	"strings"

	"github.com/sluice-go/sluice/internal/clip"
)

// Path patterns: a rule covers the request paths its pattern matches
// (Rule.Path), besides the plain prefixes of Rule.PathPrefix. A pattern is
// a canonical path whose segments are literals or parameters:
//
//	/v1/orgs/{org}/orders          {org} is any one segment, not empty
//	/v1/orgs/{org}/files/{rest...} {rest...} is the rest of the path after
//	                               "files/", empty or not (not /v1/orgs/acme/files)
//
// A pattern matches a whole path: /v1/orgs/{org}/orders covers
// /v1/orgs/acme/orders and not /v1/orgs/acme/orders/7, for which the
// pattern ends in a {name...} parameter. A parameter takes a whole
// segment ("/v{n}" is refused), its name is letters, digits and '_', and
// a name appears once. The path is matched in the ruleset's match form
// (CanonicalPath, case-folded under PathCaseInsensitive, the pattern's
// literals too), and a parameter's value is the segment of that form: a
// rule scoped param:NAME counts each value apart (Scope).
//
// Which rule is more specific (Ruleset.AppendMatch) compares the two
// paths from the left, the prefix of a rule read as its bytes followed by
// "anything": at the first place they differ, a literal byte beats a
// parameter, a parameter beats a {name...} or a prefix's end, and a
// pattern's end (it matches no longer path) beats a {name...} or a
// prefix's end. So /v1/orgs/acme/{any} beats /v1/orgs/{org}/orders (at
// "acme"), /v1/orgs/{org}/orders beats the prefix /v1/orgs/ and the
// prefix /v1/orgs/acme beats /v1/orgs/{org}/orders, as routers that
// prefer static segments (httprouter, chi) would route them. Between two
// prefixes the longer wins, as before patterns.

// maxPatternParams is how many parameters a pattern may have.
const maxPatternParams = 8

// patSeg is one segment of a compiled pattern: a literal, a parameter
// ({name}) or the rest ({name...}, last).
type patSeg struct {
	lit   string // the literal segment, without slashes; "" for a parameter
	param string // the parameter's name
	rest  bool   // {name...}: what is left of the path
}

// pattern is a compiled Rule.Path.
type pattern struct {
	segs  []patSeg
	slash bool // the pattern ends in "/": the path must too (a last empty segment)
	toks  []pathTok
}

// A pathTok is one step of a rule's path as specificity compares paths:
// a literal byte, a parameter, the rest, or the end.
type pathTok struct {
	kind tokKind
	b    byte // the literal byte
}

type tokKind uint8

// The token kinds, least specific first.
const (
	tokRest  tokKind = iota // a {name...}, or what follows a prefix
	tokEnd                  // a pattern's end: no longer path
	tokParam                // a {name}
	tokLit                  // a literal byte
)

// compilePattern compiles a path pattern, or says why it is not one.
func compilePattern(p string) (*pattern, string) {
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Sprintf("must start with \"/\", got %s", clip.Quote(p, clip.Max))
	}
	if CanonicalPath(p) != p {
		return nil, fmt.Sprintf("request paths are matched in canonical form (repeated slashes merged, \".\" and \"..\" segments removed), so %s would match none: write %s",
			clip.Quote(p, clip.Max), clip.Quote(CanonicalPath(p), clip.Max))
	}
	pt := &pattern{}
	body := p[1:]
	if strings.HasSuffix(body, "/") {
		pt.slash, body = true, body[:len(body)-1]
	}
	var names []string
	if body != "" {
		for i, seg := range strings.Split(body, "/") {
			last := i == strings.Count(body, "/")
			if !strings.ContainsAny(seg, "{}") {
				pt.segs = append(pt.segs, patSeg{lit: seg})
				continue
			}
			name, ok := strings.CutPrefix(seg, "{")
			if name, ok = strings.CutSuffix(name, "}"); !ok || strings.ContainsAny(name, "{}") {
				return nil, fmt.Sprintf("a parameter is a whole segment, {name} or a last {name...}, got segment %s", clip.Quote(seg, clip.Max))
			}
			s := patSeg{param: name}
			if n, ok := strings.CutSuffix(name, "..."); ok {
				if !last || pt.slash {
					return nil, fmt.Sprintf("{%s} takes the rest of the path, so it must be the last segment", name)
				}
				s.param, s.rest = n, true
			}
			if !validParamName(s.param) {
				return nil, fmt.Sprintf("a parameter's name is 1 to 64 letters, digits or '_', got %s", clip.Quote(s.param, clip.Max))
			}
			for _, o := range names {
				if o == s.param {
					return nil, fmt.Sprintf("parameter {%s} appears twice", s.param)
				}
			}
			if len(names) == maxPatternParams {
				return nil, fmt.Sprintf("at most %d parameters", maxPatternParams)
			}
			names = append(names, s.param)
			pt.segs = append(pt.segs, s)
		}
	}
	pt.toks = pt.tokens()
	return pt, ""
}

// validParamName reports a parameter name: 1 to 64 ASCII letters, digits
// and '_'.
func validParamName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// tokens returns the pattern as specificity compares it.
func (pt *pattern) tokens() []pathTok {
	var t []pathTok
	lit := func(s string) {
		for i := 0; i < len(s); i++ {
			t = append(t, pathTok{kind: tokLit, b: s[i]})
		}
	}
	lit("/")
	for i, s := range pt.segs {
		if i > 0 {
			lit("/")
		}
		switch {
		case s.rest:
			return append(t, pathTok{kind: tokRest})
		case s.param != "":
			t = append(t, pathTok{kind: tokParam})
		default:
			lit(s.lit)
		}
	}
	if pt.slash && len(pt.segs) > 0 {
		lit("/")
	}
	return append(t, pathTok{kind: tokEnd})
}

// prefixTokens returns a path prefix as specificity compares it.
func prefixTokens(prefix string) []pathTok {
	t := make([]pathTok, 0, len(prefix)+1)
	for i := 0; i < len(prefix); i++ {
		t = append(t, pathTok{kind: tokLit, b: prefix[i]})
	}
	return append(t, pathTok{kind: tokRest})
}

// comparePaths orders two rules' paths, given as tokens, most specific
// first: negative when a is more specific. It is the lexicographic order
// of the tokens (a literal byte over a parameter over an end over a rest,
// and literal bytes in byte order), so a total order; between two rules
// that cover one path, it is the order of specificity documented above.
func comparePaths(a, b []pathTok) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		x, y := a[i], b[i]
		if x.kind != y.kind {
			return int(y.kind) - int(x.kind)
		}
		if x.kind == tokLit && x.b != y.b {
			// No path matches both: any order will do, as long as it
			// is one (lexicographic, so transitive).
			return int(x.b) - int(y.b)
		}
	}
	return 0
}

// match reports whether the pattern matches path, in match form, with
// no allocation.
func (pt *pattern) match(path string) bool {
	_, ok := pt.walk(path, -1)
	return ok
}

// param returns the value of the pattern's parameter name in path, which
// the pattern matches, and whether it has it.
func (pt *pattern) param(path, name string) (string, bool) {
	for i, s := range pt.segs {
		if s.param == name {
			return pt.walk(path, i)
		}
	}
	return "", false
}

// walk matches path against the pattern, and returns the value of the
// segment at index want (-1 for none).
func (pt *pattern) walk(path string, want int) (string, bool) {
	if path == "" || path[0] != '/' {
		return "", false
	}
	rest := path[1:]
	var val string
	for i, s := range pt.segs {
		if i > 0 {
			if rest == "" || rest[0] != '/' {
				return "", false
			}
			rest = rest[1:]
		}
		if s.rest {
			if i == want {
				val = rest
			}
			return val, true
		}
		j := strings.IndexByte(rest, '/')
		if j < 0 {
			j = len(rest)
		}
		seg := rest[:j]
		if s.param != "" {
			if seg == "" {
				return "", false
			}
			if i == want {
				val = seg
			}
		} else if seg != s.lit {
			return "", false
		}
		rest = rest[j:]
	}
	if pt.slash && len(pt.segs) > 0 {
		return val, rest == "/"
	}
	return val, rest == ""
}

// fold case-folds the pattern's literals, for a ruleset of
// PathCaseInsensitive.
func (pt *pattern) fold() {
	for i := range pt.segs {
		pt.segs[i].lit = foldCase(pt.segs[i].lit)
	}
	pt.toks = pt.tokens()
}

// params lists the pattern's parameter names.
func (pt *pattern) params() []string {
	var names []string
	for _, s := range pt.segs {
		if s.param != "" {
			names = append(names, s.param)
		}
	}
	return names
}
