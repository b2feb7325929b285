package sluice_test

import (
	"errors"
	"path"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

func TestCanonicalPath(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/api/orders", "/api/orders"},
		{"//api/orders", "/api/orders"},
		{"/api//orders", "/api/orders"},
		{"/api///orders//", "/api/orders/"},
		{"/api/./orders", "/api/orders"},
		{"/api/x/../orders", "/api/orders"},
		{"/api/x/y/../../orders", "/api/orders"},
		{"/api/../../../orders", "/orders"},
		{"/api/%2e%2e/", "/api/%2e%2e/"}, // not decoded: the caller gives net/http's decoded path
		{"/api/../", "/"},                // /api/%2e%2e/ as net/http decodes it
		{"/..", "/"},
		{"/.", "/"},
		{"/../api/orders", "/api/orders"},
		{"/api/orders/", "/api/orders/"},
		{"/api/orders/.", "/api/orders/"},
		{"/api/orders/..", "/api/"},
		{"/api/orders/x/..", "/api/orders/"},
		{"", "/"},
		{"/", "/"},
		{"//", "/"},
		{"*", "/*"},
		{"api/orders", "/api/orders"},
		{"/api/orders/../../x", "/x"},
		{"/a//../b", "/b"}, // slashes merged first, as path.Clean and a file system read it
		{"/.well-known/x", "/.well-known/x"},
		{"/..data/x", "/..data/x"},
		{"/a/.../b", "/a/.../b"},
		{"/api/orders?x=1", "/api/orders?x=1"}, // a query is not part of a path: doors give the path alone
		{"/api/orders;a=b", "/api/orders;a=b"},
		{"/api\\..\\orders", "/api\\..\\orders"}, // a backslash is no separator
		{"/api%2Forders", "/api%2Forders"},       // as given; net/http has decoded %2F to "/" before
		{"/files/a/b/../c", "/files/a/c"},        // /files/a%2Fb/../c as net/http decodes it
	} {
		if got := sluice.CanonicalPath(tt.in); got != tt.want {
			t.Errorf("CanonicalPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// The canonical path does not allocate when the path is canonical already.
func TestCanonicalPathOfACanonicalPathAllocatesNothing(t *testing.T) {
	p := "/api/v1/orders/12345/items/"
	if n := testing.AllocsPerRun(100, func() { _ = sluice.CanonicalPath(p) }); n != 0 {
		t.Errorf("CanonicalPath(%q): %v allocations, want 0", p, n)
	}
}

// cleanReference is the canonical path by another road: path.Clean of the
// path read from the root, with the trailing slash a path ending in "/",
// "/." or "/.." implies put back.
func cleanReference(p string) string {
	c := path.Clean("/" + p)
	last := p[strings.LastIndexByte(p, '/')+1:]
	if c != "/" && (strings.HasSuffix(p, "/") || last == "." || last == "..") {
		c += "/"
	}
	return c
}

// isCanonicalForm reports whether p has the shape CanonicalPath promises.
func isCanonicalForm(p string) bool {
	return strings.HasPrefix(p, "/") && !strings.Contains(p, "//") && !strings.Contains(p, "/./") && !strings.Contains(p, "/../") &&
		!strings.HasSuffix(p, "/.") && !strings.HasSuffix(p, "/..")
}

// checkCanonical checks what CanonicalPath promises of p: a canonical
// result, its own canonical form, equal to the path.Clean reference.
func checkCanonical(t interface{ Fatalf(string, ...any) }, p string) {
	c := sluice.CanonicalPath(p)
	if !isCanonicalForm(c) {
		t.Fatalf("CanonicalPath(%q) = %q: not canonical", p, c)
	}
	if cc := sluice.CanonicalPath(c); cc != c {
		t.Fatalf("CanonicalPath(CanonicalPath(%q)) = %q, want %q", p, cc, c)
	}
	if want := cleanReference(p); c != want {
		t.Fatalf("CanonicalPath(%q) = %q, path.Clean's reference %q", p, c, want)
	}
}

func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{"", "/", "//api/orders", "/api//orders", "/api/./orders", "/api/x/../orders", "/..", "/api/../",
		"*", "a/b/", "/a/b/..", "/.well-known", "/%2e%2e/", "/a//../b", "/\xff/../x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		checkCanonical(t, p)
		// A rule on the canonical path covers every spelling of it.
		c := sluice.CanonicalPath(p)
		rs, err := sluice.NewRuleset([]sluice.Rule{{Name: "r", PathPrefix: c, Scope: sluice.ScopeGlobal,
			Algorithm: algo.FixedWindowName, Limit: 1, Window: time.Second}}, nil, "")
		if err != nil {
			t.Fatalf("a rule on %q: %v", c, err)
		}
		if got := rs.AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: p}); len(got) != 1 {
			t.Fatalf("a rule on %q does not cover %q", c, p)
		}
	})
}

// segment draws a path segment, dots and percent signs included.
func segment() *rapid.Generator[string] {
	return rapid.StringOfN(rapid.SampledFrom([]rune("abcXY.%-_~:;1")), 1, 6, -1).Filter(func(s string) bool { return s != "." && s != ".." })
}

// respell spells the canonical path of segs otherwise, as an upstream
// routes it alike: "//", "/./" or "/seg/../" put before any segment.
func respell(t *rapid.T, segs []string, trailing bool) string {
	var b strings.Builder
	for i, s := range segs {
		b.WriteString("/")
		for range rapid.IntRange(0, 2).Draw(t, "insertions") {
			switch rapid.IntRange(0, 2).Draw(t, "kind") {
			case 0:
				b.WriteString("/")
			case 1:
				b.WriteString("./")
			case 2:
				b.WriteString(segment().Draw(t, "detour") + "/../")
			}
		}
		b.WriteString(s)
		_ = i
	}
	if trailing {
		b.WriteString(rapid.SampledFrom([]string{"/", "//", "/.", "/./"}).Draw(t, "trailing"))
	}
	return b.String()
}

// The canonical form is idempotent, agrees with path.Clean's reference,
// and two spellings an upstream routes alike match the same rules.
func TestCanonicalPathProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := rapid.StringOfN(rapid.SampledFrom([]rune("/./a.b%")), 0, 24, -1).Draw(t, "p")
		checkCanonical(t, p)
	})
	rapid.Check(t, func(t *rapid.T) {
		segs := rapid.SliceOfN(segment(), 1, 5).Draw(t, "segments")
		trailing := rapid.Bool().Draw(t, "trailing")
		canonical := "/" + strings.Join(segs, "/")
		if trailing {
			canonical += "/"
		}
		spelled := respell(t, segs, trailing)
		if got := sluice.CanonicalPath(spelled); got != canonical {
			t.Fatalf("CanonicalPath(%q) = %q, want %q", spelled, got, canonical)
		}
		// Rules on prefixes of the path (and one beside it), in both
		// match modes: the spelling matches what the canonical path does.
		var rules []sluice.Rule
		for i := range segs {
			prefix := "/" + strings.Join(segs[:i+1], "/")
			rules = append(rules, sluice.Rule{Name: "r" + string(rune('0'+i)), Method: "POST", PathPrefix: prefix,
				Scope: sluice.ScopeUser, Algorithm: algo.TokenBucketName, Limit: 5, Window: time.Minute})
		}
		rules = append(rules, sluice.Rule{Name: "other", PathPrefix: "/other", Scope: sluice.ScopeIP,
			Algorithm: algo.TokenBucketName, Limit: 5, Window: time.Minute})
		for _, mode := range []sluice.MatchMode{sluice.MatchMostSpecific, sluice.MatchAll} {
			rs, err := sluice.NewRuleset(rules, nil, mode)
			if err != nil {
				t.Skip(err) // two drawn segments made the same prefix twice
			}
			want, got := joined(rs.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: canonical})), joined(rs.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: spelled}))
			if got != want || want == "" {
				t.Fatalf("%s: Match(POST, %q) = [%s], Match(POST, %q) = [%s]", mode, spelled, got, canonical, want)
			}
		}
	})
}

// joined is the names of rules, joined by spaces.
func joined(rules []*sluice.CompiledRule) string { return strings.Join(names(rules), " ") }

func TestSpellingsOfAPathMatchItsRule(t *testing.T) {
	rs, err := sluice.NewRuleset([]sluice.Rule{rule("orders", "POST", "/api/orders")}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/api/orders", "//api/orders", "/api//orders", "/api/./orders", "/api/x/../orders",
		"/x/../api/orders/", "/../api/orders", "/api/orders/."} {
		if got := joined(rs.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: p})); got != "orders" {
			t.Errorf("Match(POST, %q) = [%s], want [orders]", p, got)
		}
		if got := joined(rs.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: p})); got != "orders" {
			t.Errorf("AppendMatch(POST %q) = [%s], want [orders]", p, got)
		}
	}
	for _, p := range []string{"/api/orders/../users", "/api/ord", "/API/orders"} {
		if got := joined(rs.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: p})); got != "" {
			t.Errorf("Match(POST, %q) = [%s], want none", p, got)
		}
	}
}

func TestPrefixThatMatchesNoCanonicalPathIsRefused(t *testing.T) {
	for _, p := range []string{"/api//orders", "//api", "/api/./orders", "/api/../orders", "/./"} {
		err := rule("r", "GET", p).Validate()
		var re *sluice.RuleError
		if !errors.As(err, &re) || re.Field != "path_prefix" {
			t.Errorf("path_prefix %q: Validate() = %v, want a path_prefix error", p, err)
		}
	}
	for _, p := range []string{"/", "/.", "/..", "/.well-known", "/api/", "/api/orders."} {
		if err := rule("r", "GET", p).Validate(); err != nil {
			t.Errorf("path_prefix %q: Validate() = %v, want nil", p, err)
		}
	}
}

func TestHeadIsCoveredByAGetRule(t *testing.T) {
	for _, tt := range []struct {
		name   string
		rules  []sluice.Rule
		method string
		path   string
		want   string // most specific; then all
		all    string
	}{
		{"GET rule covers HEAD", []sluice.Rule{rule("get", "GET", "/api")}, "HEAD", "/api/x", "get", "get"},
		{"POST rule does not", []sluice.Rule{rule("post", "POST", "/api")}, "HEAD", "/api/x", "", ""},
		{"HEAD rule of the same prefix takes it", []sluice.Rule{rule("get", "GET", "/api"), rule("head", "HEAD", "/api")}, "HEAD", "/api/x", "head", "head"},
		{"and leaves GET to the GET rule", []sluice.Rule{rule("get", "GET", "/api"), rule("head", "HEAD", "/api")}, "GET", "/api/x", "get", "get"},
		{"a shorter HEAD rule does not", []sluice.Rule{rule("get", "GET", "/api"), rule("head", "HEAD", "/")}, "HEAD", "/api/x", "get", "get head"},
		{"a HEAD rule elsewhere does not", []sluice.Rule{rule("get", "GET", "/api"), rule("head", "HEAD", "/static")}, "HEAD", "/api/x", "get", "get"},
		{"a longer HEAD rule wins where it covers", []sluice.Rule{rule("get", "GET", "/api"), rule("head", "HEAD", "/api/x")}, "HEAD", "/api/x", "head", "head get"},
		{"any-method rule", []sluice.Rule{rule("any", "*", "/api"), rule("head", "HEAD", "/api")}, "HEAD", "/api/x", "head", "head any"},
	} {
		for _, mode := range []sluice.MatchMode{sluice.MatchMostSpecific, sluice.MatchAll} {
			rs, err := sluice.NewRuleset(tt.rules, nil, mode)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if mode == sluice.MatchAll {
				want = tt.all
			}
			if got := joined(rs.AppendMatch(nil, sluice.RequestShape{Method: tt.method, Path: tt.path})); got != want {
				t.Errorf("%s, %s: Match(%s, %s) = [%s], want [%s]", tt.name, mode, tt.method, tt.path, got, want)
			}
		}
	}
}

func TestPathCaseInsensitive(t *testing.T) {
	rules := []sluice.Rule{rule("orders", "POST", "/api/Orders")}
	sensitive, err := sluice.NewRuleset(rules, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	insensitive, err := sluice.NewRulesetWith(rules, nil, sluice.RulesetOptions{PathCase: sluice.PathCaseInsensitive})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sluice.RulesetPathCase(insensitive), sluice.PathCaseInsensitive; got != want {
		t.Errorf("PathCase() = %q, want %q", got, want)
	}
	for _, tt := range []struct {
		path                   string
		sensitive, insensitive string
	}{
		{"/api/Orders", "orders", "orders"},
		{"/api/orders", "", "orders"},
		{"/API/ORDERS/1", "", "orders"},
		{"//Api/./oRders", "", "orders"},
		{"/api/or\u212aers", "", ""},       // the Kelvin sign folds to k, not d
		{"/api/\u017forders", "", ""},      // nor is a long s an o
		{"/api/Order\u017f", "", "orders"}, // a long s folds to s
		{"/api/users", "", ""},
	} {
		if got := joined(sensitive.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: tt.path})); got != tt.sensitive {
			t.Errorf("sensitive: Match(POST, %q) = [%s], want [%s]", tt.path, got, tt.sensitive)
		}
		if got := joined(insensitive.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: tt.path})); got != tt.insensitive {
			t.Errorf("insensitive: Match(POST, %q) = [%s], want [%s]", tt.path, got, tt.insensitive)
		}
	}
	// Two prefixes that differ in case only are one prefix there.
	_, err = sluice.NewRulesetWith([]sluice.Rule{rule("a", "POST", "/api/orders"), rule("b", "POST", "/API/Orders")}, nil,
		sluice.RulesetOptions{PathCase: sluice.PathCaseInsensitive})
	var re *sluice.RuleError
	if !errors.As(err, &re) || re.Field != "path_prefix" || re.Rule != "b" {
		t.Errorf("two prefixes differing in case, insensitive: %v, want a path_prefix error on rule b", err)
	}
	if _, err := sluice.NewRulesetWith(rules, nil, sluice.RulesetOptions{PathCase: "lower"}); !errors.Is(err, sluice.ErrInvalidConfig) {
		t.Errorf("path case %q: %v, want ErrInvalidConfig", "lower", err)
	}
}

func BenchmarkCanonicalPath(b *testing.B) {
	for _, p := range []string{"/api/v1/orders/12345/items", "//api/v1/./orders/x/../12345/items"} {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = sluice.CanonicalPath(p)
			}
		})
	}
}
