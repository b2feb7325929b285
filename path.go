package sluice

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-go/sluice/internal/clip"
)

// Paths: every rule is matched on one canonical form of the request path,
// so that no spelling of a path an upstream routes to a resource walks past
// the rule that protects it. An upstream that cleans a path before routing
// (a static file server, most frameworks, nginx's merge_slashes before
// another hop) serves /api/orders for //api/orders, /api//orders,
// /api/./orders and /api/x/../orders alike; so Sluice matches them alike.
//
// The canonical form (CanonicalPath) is the path with repeated slashes
// merged and dot-segments removed as RFC 3986 section 5.2.4 removes them,
// never above the root: what Go's path.Clean gives, except that a trailing
// slash is kept (an upstream may route /a/ apart from /a, and a prefix
// covers both). The path is the decoded one net/http's Request.URL.Path
// holds: %2e%2e is "..", and %2F is a "/" like any other, so /api%2Forders
// is matched as /api/orders (an upstream that keeps %2F as data sees a
// different resource there, which the rule then limits too: matching errs
// towards covering). The query is never part of matching.
//
// A gRPC call is matched on its full method name, which grpc-go dispatches
// on exactly: a name spelled otherwise reaches no handler, and a valid name
// is its own canonical form.

// PathCase says whether rules match a request path's letters in their case
// as sent or in any case: RulesetOptions.PathCase, "path_case" in a
// configuration file.
type PathCase string

// The path cases.
const (
	// PathCaseSensitive, the default, matches a path's letters as sent:
	// a rule on /api/orders does not cover /API/orders, as net/http,
	// nginx and most routers would not route it there either.
	PathCaseSensitive PathCase = "sensitive"
	// PathCaseInsensitive matches a path whatever the case of its letters
	// (Unicode simple case folding, which includes ASCII's), for an
	// upstream that routes that way, as Express does by default: then a
	// rule on /api/orders covers /API/Orders too.
	PathCaseInsensitive PathCase = "insensitive"
)

// valid reports whether c is a known path case. The empty case is not
// valid here; NewRulesetWith reads it as PathCaseSensitive.
func (c PathCase) valid() bool { return c == PathCaseSensitive || c == PathCaseInsensitive }

// CanonicalPath returns the form of the request path p that rules are
// matched on: the path with repeated slashes merged into one and the
// dot-segments "." and ".." removed (RFC 3986, section 5.2.4), a ".." at
// the root staying at the root; a trailing slash, or a last segment "." or
// "..", leaves the result ending in "/". An empty path is "/", and a path
// not starting with "/" (the "*" of OPTIONS *) is read as if it did. p is
// the decoded path (net/http's Request.URL.Path): "%2e" should have been
// decoded already, and "%2F" is a slash. Every other byte is kept as it is.
//
// The result is its own canonical form, and p itself, not copied, when p
// is canonical already (the usual case costs a scan and no allocation).
func CanonicalPath(p string) string {
	if isCanonical(p) {
		return p
	}
	out := make([]byte, 0, len(p)+1)
	out = append(out, '/')
	rest := p
	for rest != "" {
		var seg string
		i := strings.IndexByte(rest, '/')
		last := i < 0
		if last {
			seg, rest = rest, ""
		} else {
			seg, rest = rest[:i], rest[i+1:]
		}
		switch seg {
		case "", ".":
			// A repeated slash, or "." naming the directory itself.
		case "..":
			out = popSegment(out)
		default:
			out = append(out, seg...)
			if !last {
				out = append(out, '/')
			}
		}
	}
	return string(out)
}

// popSegment removes the last segment of out, a canonical path ending in
// "/", never the root.
func popSegment(out []byte) []byte {
	if len(out) <= 1 {
		return out
	}
	i := strings.LastIndexByte(string(out[:len(out)-1]), '/')
	return out[:i+1]
}

// isCanonical reports whether p is its own canonical form: it starts with
// "/", no segment but the last is empty, and no segment is "." or "..".
func isCanonical(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	start := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		switch seg := p[start:i]; seg {
		case ".", "..":
			return false
		case "":
			if i < len(p) {
				return false // "//"
			}
		}
		start = i + 1
	}
	return true
}

// checkPrefix says why a rule's path prefix can never cover a canonical
// path, or "": it must start with "/" and hold no repeated slash and no
// "." or ".." segment followed by a slash. (A prefix ending in "/." or
// "/.." is a string prefix of /.well-known or /..data, and stays valid.)
func checkPrefix(prefix string) string {
	if !strings.HasPrefix(prefix, "/") {
		return fmt.Sprintf("must start with \"/\", got %s", clip.Quote(prefix, clip.Max))
	}
	if strings.Contains(prefix, "//") || strings.Contains(prefix, "/./") || strings.Contains(prefix, "/../") {
		return fmt.Sprintf("request paths are matched in canonical form (repeated slashes merged, \".\" and \"..\" segments removed), so %s would match none: write %s",
			clip.Quote(prefix, clip.Max), clip.Quote(CanonicalPath(prefix), clip.Max))
	}
	return ""
}

// foldCase returns s with each letter replaced by one representative of
// its Unicode simple case folding orbit (foldRune), so that two strings
// equal under strings.EqualFold fold to the same string, byte for byte;
// s itself when nothing changes (a path of lower-case ASCII). It is how a
// ruleset of PathCaseInsensitive compares a path with a prefix.
func foldCase(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			return foldFrom(s, i)
		}
	}
	return s
}

// foldFrom is foldCase's slow path, s's first i bytes known to be folded.
func foldFrom(s string, i int) string {
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:i])
	for _, r := range s[i:] {
		b.WriteRune(foldRune(r))
	}
	return b.String()
}

// foldRune returns the representative of r's simple case folding orbit:
// its lower-case ASCII letter when it has one (so the Kelvin sign folds to
// "k" and the long s to "s"), else the least rune of the orbit. An invalid
// byte, read as utf8.RuneError, folds to U+FFFD.
func foldRune(r rune) rune {
	least := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if 'a' <= f && f <= 'z' {
			return f
		}
		least = min(least, f)
	}
	if 'a' <= r && r <= 'z' {
		return r
	}
	return least
}
