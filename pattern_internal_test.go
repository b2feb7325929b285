package sluice

import (
	"regexp"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// patternRegexp is the model of a pattern: the regular expression of the
// paths it matches, each parameter a capture group.
func patternRegexp(p string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	body := p[1:]
	b.WriteString("/")
	segs := strings.Split(body, "/")
	for i, s := range segs {
		if i > 0 {
			b.WriteString("/")
		}
		switch {
		case strings.HasSuffix(s, "...}"):
			b.WriteString("(.*)")
		case strings.HasPrefix(s, "{"):
			b.WriteString("([^/]+)")
		default:
			b.WriteString(regexp.QuoteMeta(s))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// Whatever the pattern and the path, match and param agree with the
// pattern's regular expression, and matching allocates nothing.
func TestPatternMatchesItsModel(t *testing.T) {
	lit := rapid.SampledFrom([]string{"v1", "orgs", "a", "b", "acme", ""})
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 5).Draw(t, "n")
		var segs []string
		params := 0
		for i := range n {
			switch k := rapid.IntRange(0, 3).Draw(t, "kind"); {
			case k == 3 && i == n-1:
				segs = append(segs, "{rest...}")
				params++
			case k >= 2:
				segs = append(segs, "{p"+string(rune('0'+i))+"}")
				params++
			default:
				s := lit.Draw(t, "lit")
				if s == "" && i < n-1 {
					s = "x"
				}
				segs = append(segs, s)
			}
		}
		p := "/" + strings.Join(segs, "/")
		pt, reason := compilePattern(p)
		if reason != "" {
			t.Fatalf("compilePattern(%q): %s", p, reason)
		}
		re := patternRegexp(p)
		var path []string
		for range rapid.IntRange(0, 6).Draw(t, "len") {
			path = append(path, rapid.SampledFrom([]string{"v1", "orgs", "a", "b", "acme", "x", ""}).Draw(t, "seg"))
		}
		q := CanonicalPath("/" + strings.Join(path, "/"))
		m := re.FindStringSubmatch(q)
		if got := pt.match(q); got != (m != nil) {
			t.Fatalf("pattern %q on %q: match %v, model %v", p, q, got, m != nil)
		}
		if m == nil {
			return
		}
		j := 1
		for _, s := range pt.segs {
			if s.param == "" {
				continue
			}
			v, ok := pt.param(q, s.param)
			if !ok || v != m[j] {
				t.Fatalf("pattern %q on %q: {%s} = %q, %v; model %q", p, q, s.param, v, ok, m[j])
			}
			j++
		}
		if a := testing.AllocsPerRun(10, func() { pt.match(q) }); a != 0 {
			t.Fatalf("match allocates %v", a)
		}
	})
}

func TestPatternRefused(t *testing.T) {
	for _, p := range []string{
		"orgs", "//a", "/a/./b", "/a/../b", "/v{n}", "/{a}/{a}", "/{rest...}/x", "/{}", "/{a-b}", "/{a}}", "/{rest...}/",
		"/{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}",
	} {
		if _, reason := compilePattern(p); reason == "" {
			t.Errorf("compilePattern(%q) accepted", p)
		}
	}
	for _, p := range []string{"/", "/a", "/a/", "/{a}", "/{a}/", "/v1/orgs/{org}/orders", "/files/{path...}", "/{all...}"} {
		if _, reason := compilePattern(p); reason != "" {
			t.Errorf("compilePattern(%q): %s", p, reason)
		}
	}
}

// Specificity is a strict weak order over rules' paths: irreflexive,
// asymmetric and transitive, so that sorting is stable and the most
// specific rule is well defined.
func TestComparePathsIsAnOrder(t *testing.T) {
	gen := rapid.Custom(func(t *rapid.T) []pathTok {
		segs := rapid.SliceOfN(rapid.SampledFrom([]string{"a", "ab", "{p}", "b", "zzzzzzz", "{q}"}), 0, 4).Draw(t, "segs")
		if rapid.Bool().Draw(t, "prefix") {
			s := "/" + strings.ReplaceAll(strings.Join(segs, "/"), "{p}", "p")
			return prefixTokens(s[:rapid.IntRange(1, len(s)).Draw(t, "cut")])
		}
		p := "/" + strings.Join(segs, "/")
		if rapid.Bool().Draw(t, "rest") {
			p = strings.TrimSuffix(p, "/") + "/{r...}"
		}
		pt, reason := compilePattern(p)
		if reason != "" {
			t.Skip(reason)
		}
		return pt.toks
	})
	rapid.Check(t, func(t *rapid.T) {
		a, b, c := gen.Draw(t, "a"), gen.Draw(t, "b"), gen.Draw(t, "c")
		if comparePaths(a, a) != 0 {
			t.Fatal("not irreflexive")
		}
		if sign(comparePaths(a, b)) != -sign(comparePaths(b, a)) {
			t.Fatal("not antisymmetric")
		}
		if comparePaths(a, b) < 0 && comparePaths(b, c) < 0 && comparePaths(a, c) >= 0 {
			t.Fatalf("not transitive: %v %v %v", a, b, c)
		}
	})
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}
