package fuzz

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

// paramSeg finds the parameters of a path pattern.
var paramSeg = regexp.MustCompile(`\{[A-Za-z0-9_]+(\.\.\.)?\}`)

// FuzzPathPattern: any text given as a rule's path pattern is refused
// with a RuleError on "path", or accepted; an accepted pattern matches
// the path made of it by filling each parameter with a segment (and a
// rest with two), matches nothing else of the fuzzed path that a
// case-sensitive literal comparison of its literal segments rules out,
// and matching any path neither panics nor allocates.
func FuzzPathPattern(f *testing.F) {
	for _, s := range []string{"/v1/orgs/{org}/orders", "/files/{path...}", "/", "/a/", "/{a}/{b}/", "/v{n}", "/{x...}/y", "//a", "/a/./{b}", "/{}", "/{a}{b}"} {
		f.Add(s, "/v1/orgs/acme/orders")
	}
	f.Fuzz(func(t *testing.T, pattern, path string) {
		r := sluice.Rule{Name: "p", Path: pattern, Scope: sluice.ScopeUser, Algorithm: algo.FixedWindowName, Limit: 1, Window: time.Minute}
		err := r.Validate()
		if err != nil {
			if re := (*sluice.RuleError)(nil); !asRuleError(err, &re) || re.Field != "path" {
				t.Fatalf("Path %q: %v, want a RuleError on path", pattern, err)
			}
			return
		}
		rs, err := sluice.NewRuleset([]sluice.Rule{r}, nil, "")
		if err != nil {
			t.Fatalf("Path %q valid alone, refused in a ruleset: %v", pattern, err)
		}
		filled := paramSeg.ReplaceAllStringFunc(pattern, func(p string) string {
			if strings.HasSuffix(p, "...}") {
				return "r1/r2"
			}
			return "x"
		})
		var dst [1]*sluice.CompiledRule
		if got := rs.AppendMatch(dst[:0], sluice.RequestShape{Path: filled}); len(got) != 1 {
			t.Fatalf("Path %q does not match %q, made of it", pattern, filled)
		}
		q := sluice.RequestShape{Path: sluice.CanonicalPath(path)}
		matched := len(rs.AppendMatch(dst[:0], q)) == 1
		if matched && !strings.HasPrefix(q.Path, literalHead(pattern)) {
			t.Fatalf("Path %q matches %q, which does not start with its literal head %q", pattern, q.Path, literalHead(pattern))
		}
		if n := testing.AllocsPerRun(5, func() { rs.AppendMatch(dst[:0], q) }); n != 0 {
			t.Fatalf("matching %q against %q allocates %v", q.Path, pattern, n)
		}
	})
}

// literalHead returns the pattern up to its first parameter.
func literalHead(pattern string) string {
	if i := strings.IndexByte(pattern, '{'); i >= 0 {
		return pattern[:i]
	}
	return pattern
}

func asRuleError(err error, re **sluice.RuleError) bool {
	e, ok := err.(*sluice.RuleError)
	*re = e
	return ok
}
