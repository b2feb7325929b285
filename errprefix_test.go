package sluice_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// prefixed is the start of an error text that names where it comes from:
// a word or a path of words, then ": ".
var prefixed = regexp.MustCompile(`^([a-z][a-z0-9_]*(?:/[a-z][a-z0-9_]*)*): `)

// Every library package's own errors start with "sluice/" and its path
// below the module ("sluice/backend/redis: ", "sluice/httplimit: "), the
// root package's with "sluice: ", so an error read in a log says where it
// came from. The check reads each errors.New and fmt.Errorf whose text
// starts with a package's name or with "sluice": text that starts with
// anything else (a configuration field, "window: ...") is not a prefix.
// Programs (package main) speak to their users in their own words and are
// left out, as is the benchmark module.
func TestErrorPrefixes(t *testing.T) {
	names := map[string]bool{"sluice": true}
	type file struct{ rel, dir string }
	var files []file
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch {
			case p == "bench", p == "var", p == "bin", strings.HasPrefix(d.Name(), ".") && p != ".", d.Name() == "testdata":
				return filepath.SkipDir
			}
			if p != "." {
				names[d.Name()] = true
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			files = append(files, file{rel: filepath.ToSlash(p), dir: filepath.ToSlash(filepath.Dir(p))})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		af, err := parser.ParseFile(fset, f.rel, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if af.Name.Name == "main" {
			continue
		}
		want := "sluice"
		if f.dir != "." {
			want = path.Join("sluice", f.dir)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok || !(pkg.Name == "errors" && sel.Sel.Name == "New" || pkg.Name == "fmt" && sel.Sel.Name == "Errorf") {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			text, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			m := prefixed.FindStringSubmatch(text)
			if m == nil || !names[strings.SplitN(m[1], "/", 2)[0]] {
				return true
			}
			checked++
			if m[1] != want {
				t.Errorf("%s: error %q starts with %q, want %q", fset.Position(lit.Pos()), text, m[1]+": ", want+": ")
			}
			return true
		})
	}
	if checked < 50 {
		t.Errorf("only %d prefixed errors found: the check has gone blind", checked)
	}
}
