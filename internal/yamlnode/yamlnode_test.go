package yamlnode

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice"
)

// root parses data and returns its document's top node.
func root(t *testing.T, data string) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(data), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Content[0]
}

// The YAML library reports a syntax error only as text, "yaml: line N:
// problem"; SyntaxError reads the problem from it. This pins the text, so
// that an upgrade of the library that changes it fails here rather than
// quietly losing the problem from the errors users see.
func TestSyntaxErrorText(t *testing.T) {
	data := []byte("a: 1\nb: 2\nc 2\nd: 3\n")
	var n yaml.Node
	err := yaml.Unmarshal(data, &n)
	if err == nil || err.Error() != "yaml: line 3: could not find expected ':'" {
		t.Fatalf("yaml.Unmarshal = %v, want the text SyntaxError reads: yaml: line 3: could not find expected ':'", err)
	}
	r := Reader{File: "c.yaml"}
	if got, want := r.SyntaxError(err, data).Error(), "c.yaml:3: could not find expected ':'"; got != want {
		t.Errorf("SyntaxError = %s, want %s", got, want)
	}
}

// The library names the line where the enclosing block began; the error
// names the line at fault.
func TestSyntaxErrorLine(t *testing.T) {
	data := []byte("identity:\n  user_header: X\n  api_key_header: Y\n  ipv6_prefix: 64\n  a: 1\n  b: 2\n c: [10.0.0.2]\nrules: []\n")
	var n yaml.Node
	err := yaml.Unmarshal(data, &n)
	if err == nil {
		t.Fatal("parsed")
	}
	r := Reader{File: "g.yaml"}
	e := r.SyntaxError(err, data)
	if got, want := e.Error(), "g.yaml:7: did not find expected key"; got != want {
		t.Errorf("SyntaxError = %s, want %s", got, want)
	}
	if !errors.Is(e, sluice.ErrInvalidConfig) || errors.Unwrap(e) != err {
		t.Errorf("%v does not match ErrInvalidConfig and unwrap to the library's error", e)
	}
}

// Fields walks a mapping: unknown, repeated and non-string keys are
// refused naming the line and the field; in the strict dialect anchors and
// aliases are refused, with Aliases they are followed and merge keys
// expanded, the mapping's own keys first.
func TestFields(t *testing.T) {
	strict := Reader{File: "s.yaml"}
	loose := Reader{File: "l.yaml", Aliases: true, KeyError: "config error, key is not of type string: %s"}
	known := func(got *[]string) func(string, *yaml.Node, string) (bool, error) {
		return func(key string, v *yaml.Node, field string) (bool, error) {
			if key == "unknown" {
				return false, nil
			}
			*got = append(*got, fmt.Sprintf("%s=%s@%d", field, Describe(v), v.Line))
			return true, nil
		}
	}
	for _, c := range []struct {
		r    Reader
		data string
		want string // the fields set, or the error
	}{
		{strict, "a: 1\nb: x\n", "a=the integer 1@1 b=\"x\"@2"},
		{strict, "a: 1\nunknown: 2\n", "s.yaml:2: unknown: unknown key"},
		{strict, "a: 1\na: 2\n", "s.yaml:2: a: given twice"},
		{strict, "1: a\n", `s.yaml:1: want a key name, got the integer 1`},
		{strict, "a: &x 1\n", "s.yaml:1: a: anchors and aliases are not supported"},
		{strict, "- a\n", "s.yaml:1: want a mapping, got a list"},
		{loose, "x: &m {a: 1, b: 2}\ny:\n  <<: *m\n  b: 3\n", "y.b=the integer 3@4 y.a=the integer 1@1"},
		{loose, "1: a\n", "l.yaml:1: config error, key is not of type string: the integer 1"},
		{loose, "y:\n  <<: [1]\n", "l.yaml:2: y: a merge key wants a mapping, got the integer 1"},
		{loose, "y: [a]\n", "l.yaml:1: y: want a mapping, got a list"},
	} {
		var got []string
		n := root(t, c.data)
		set := known(&got)
		var err error
		if strings.HasPrefix(c.data, "x:") || strings.HasPrefix(c.data, "y:") {
			// the mapping under y
			err = c.r.Fields(n, "", func(key string, v *yaml.Node, field string) (bool, error) {
				if key == "x" {
					return true, nil
				}
				return true, c.r.Fields(v, field, set)
			})
		} else {
			err = c.r.Fields(n, "", set)
		}
		out := strings.Join(got, " ")
		if err != nil {
			out = err.Error()
		}
		if out != c.want {
			t.Errorf("%s %q: %s, want %s", c.r.File, c.data, out, c.want)
		}
	}
}

// The typed scalars take what they say and name what they got otherwise.
func TestScalars(t *testing.T) {
	r := Reader{File: "f.yaml"}
	n := root(t, "s: x\nnull:\ni: 7\nf: 5.5\nb: true\nd: 1m\nbad: 1 minute\nl: [1]\nneg: -1\nbig: 4000000000\nanchored: &a 1\n")
	v := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		v[n.Content[i].Value] = n.Content[i+1]
	}
	errText := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	s, err := r.Str(v["s"], "s")
	if s != "x" || err != nil {
		t.Errorf("Str = %q, %v", s, err)
	}
	if _, err := r.Str(v["null"], "null"); errText(err) != "f.yaml:2: null: want a string, got nothing" {
		t.Errorf("Str(null) = %v", err)
	}
	if err := r.Want(v["anchored"], "anchored", "a list"); errText(err) != "f.yaml:11: anchored: anchors and aliases are not supported" {
		t.Errorf("Want(anchored) = %v", err)
	}
	loose := Reader{File: "f.yaml", Aliases: true}
	if err := loose.Want(v["anchored"], "anchored", "a list"); errText(err) != "f.yaml:11: anchored: want a list, got the integer 1" {
		t.Errorf("Want(anchored) with Aliases = %v", err)
	}
	if i, err := r.Int(v["i"], "i"); i != 7 || err != nil {
		t.Errorf("Int = %d, %v", i, err)
	}
	if _, err := r.Int(v["f"], "f"); errText(err) != "f.yaml:4: f: want an integer, got the number 5.5" {
		t.Errorf("Int(5.5) = %v", err)
	}
	if _, err := r.Uint(v["neg"], "neg", 10); errText(err) != "f.yaml:9: neg: want an integer from 0 to 10, got the integer -1" {
		t.Errorf("Uint(-1) = %v", err)
	}
	if _, err := r.Uint(v["big"], "big", 1e9); errText(err) != "f.yaml:10: big: want an integer from 0 to 1000000000, got the integer 4000000000" {
		t.Errorf("Uint(4e9) = %v", err)
	}
	if b, err := r.Bool(v["b"], "b"); !b || err != nil {
		t.Errorf("Bool = %v, %v", b, err)
	}
	if _, err := r.Bool(v["s"], "s"); errText(err) != `f.yaml:1: s: want true or false, got "x"` {
		t.Errorf("Bool(x) = %v", err)
	}
	if d, err := r.Duration(v["d"], "d"); d.String() != "1m0s" || err != nil {
		t.Errorf("Duration = %v, %v", d, err)
	}
	if _, err := r.Duration(v["bad"], "bad"); errText(err) != `f.yaml:7: bad: want a duration such as 1m or 500ms, got "1 minute"` {
		t.Errorf("Duration(1 minute) = %v", err)
	}
	if _, err := r.OneOf(v["s"], "s", "a", "b"); errText(err) != `f.yaml:1: s: want one of a, b, got "x"` {
		t.Errorf("OneOf = %v", err)
	}
	if _, err := r.Str(v["l"], "l"); errText(err) != "f.yaml:8: l: want a string, got a list" {
		t.Errorf("Str(list) = %v", err)
	}
}
