// Package yamlnode reads a YAML file's node tree (go.yaml.in/yaml/v3's
// yaml.Node) into a program's own types, with errors that name the file,
// the line and the field at fault (*configerr.Error, which package config
// exports as config.Error): it walks a mapping's keys, refusing unknown and
// repeated ones; reads typed scalars; describes a node for "want X, got Y"
// messages; and places a YAML syntax error on the line at fault. Package
// config reads the gateway's file with it, package envoyrls/rlsfile
// envoyproxy/ratelimit's.
//
// A Reader is a plain value, safe for concurrent use once set up.
package yamlnode

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice/internal/configerr"
)

// Reader reads the nodes of one file. Its zero value, with File set, is
// the strict dialect of Sluice's own configuration: anchors and aliases are
// refused.
type Reader struct {
	// File is what errors call the file.
	File string
	// Aliases makes the reader follow aliases and expand merge keys ("<<",
	// a mapping's own keys winning over merged ones), as YAML 1.1 readers
	// and envoyproxy/ratelimit do. Without it an anchor or an alias is an
	// error: "anchors and aliases are not supported".
	Aliases bool
	// KeyError is the reason given for a mapping key that is not a string,
	// with one %s for what it is; empty means "want a key name, got %s".
	KeyError string
}

// Errorf returns the error at line (0 when unknown) and field.
func (r *Reader) Errorf(line int, field, format string, args ...any) *configerr.Error {
	return &configerr.Error{File: r.File, Line: line, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Want returns the error of a node that is not what field wants: "want
// WANT, got WHAT-IT-IS", or, without Aliases, the refusal of an anchor or
// an alias.
func (r *Reader) Want(n *yaml.Node, field, want string) *configerr.Error {
	if !r.Aliases && (n.Kind == yaml.AliasNode || n.Anchor != "") {
		return r.Errorf(n.Line, field, "anchors and aliases are not supported")
	}
	return r.Errorf(n.Line, field, "want %s, got %s", want, Describe(n))
}

// Resolve follows an alias to the node it names; any other node is itself.
// A dangling alias is a null.
func Resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 16; i++ {
		n = n.Alias
	}
	if n == nil {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	}
	return n
}

// Describe names what a node holds, for "want X, got Y" messages: "a
// mapping", "a list", "an alias", "nothing", "the integer 5", "the number
// 5.5", "the boolean true", or a string quoted; a value is shown up to a
// few hundred bytes (configerr.Quote, configerr.Clip).
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.Tag {
	case "!!null":
		return "nothing"
	case "!!int":
		return "the integer " + configerr.Clip(n.Value)
	case "!!float":
		return "the number " + configerr.Clip(n.Value)
	case "!!bool":
		return "the boolean " + configerr.Clip(n.Value)
	}
	return configerr.Quote(n.Value)
}

// Fields walks the mapping n at path, calling set for each key with the
// key's value and field path; set returns false for a key it does not know,
// which is an "unknown key" error. Keys must be unique strings.
//
// Without Aliases the keys are checked one by one as set is called, and a
// value with an anchor or an alias is refused. With Aliases, n and the
// values are resolved, merge keys expanded, and every key checked before
// set is first called.
func (r *Reader) Fields(n *yaml.Node, path string, set func(key string, val *yaml.Node, field string) (bool, error)) error {
	if r.Aliases {
		return r.mergedFields(n, path, set)
	}
	if n.Kind != yaml.MappingNode {
		return r.Want(n, path, "a mapping")
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := r.checkKey(k, path, seen); err != nil {
			return err
		}
		field := configerr.Join(path, k.Value)
		if v.Kind == yaml.AliasNode || v.Anchor != "" {
			return r.Errorf(v.Line, field, "anchors and aliases are not supported")
		}
		if err := r.set(k, v, field, set); err != nil {
			return err
		}
	}
	return nil
}

// mergedFields is Fields with Aliases.
func (r *Reader) mergedFields(n *yaml.Node, path string, set func(key string, val *yaml.Node, field string) (bool, error)) error {
	n = Resolve(n)
	if n.Kind != yaml.MappingNode {
		return r.Want(n, path, "a mapping")
	}
	type pair struct{ k, v *yaml.Node }
	var own, merged []pair
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], Resolve(n.Content[i+1])
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			srcs := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				srcs = v.Content
			}
			for _, s := range srcs {
				s = Resolve(s)
				if s.Kind != yaml.MappingNode {
					return r.Errorf(k.Line, path, "a merge key wants a mapping, got %s", Describe(s))
				}
				for j := 0; j+1 < len(s.Content); j += 2 {
					merged = append(merged, pair{s.Content[j], Resolve(s.Content[j+1])})
				}
			}
			continue
		}
		if err := r.checkKey(k, path, seen); err != nil {
			return err
		}
		own = append(own, pair{k, v})
	}
	for _, m := range merged {
		if !seen[m.k.Value] { // the mapping's own keys win over merged ones
			seen[m.k.Value] = true
			own = append(own, m)
		}
	}
	for _, p := range own {
		if err := r.set(p.k, p.v, configerr.Join(path, p.k.Value), set); err != nil {
			return err
		}
	}
	return nil
}

// checkKey refuses a key that is not a string or that seen holds, and
// adds it to seen.
func (r *Reader) checkKey(k *yaml.Node, path string, seen map[string]bool) error {
	if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
		format := r.KeyError
		if format == "" {
			format = "want a key name, got %s"
		}
		return r.Errorf(k.Line, path, format, Describe(k))
	}
	if seen[k.Value] {
		return r.Errorf(k.Line, configerr.Join(path, k.Value), "given twice")
	}
	seen[k.Value] = true
	return nil
}

// set calls Fields' set for one key.
func (r *Reader) set(k, v *yaml.Node, field string, set func(key string, val *yaml.Node, field string) (bool, error)) error {
	ok, err := set(k.Value, v, field)
	if err != nil {
		return err
	}
	if !ok {
		return r.Errorf(k.Line, field, "unknown key")
	}
	return nil
}

// Str reads a scalar as a string, as its text: 50.0.0.5 and 2061111111
// are strings too. Nothing (null) is not.
func (r *Reader) Str(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", r.Want(n, field, "a string")
	}
	return n.Value, nil
}

// OneOf reads a string that must be one of choices.
func (r *Reader) OneOf(n *yaml.Node, field string, choices ...string) (string, error) {
	s, err := r.Str(n, field)
	if err != nil {
		return "", err
	}
	for _, c := range choices {
		if s == c {
			return s, nil
		}
	}
	return "", r.Errorf(n.Line, field, "want one of %s, got %s", strings.Join(choices, ", "), configerr.Quote(s))
}

// Int reads an integer.
func (r *Reader) Int(n *yaml.Node, field string) (int64, error) {
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		return 0, r.Want(n, field, "an integer")
	}
	return v, nil
}

// Uint reads an integer from 0 to max.
func (r *Reader) Uint(n *yaml.Node, field string, max uint64) (uint64, error) {
	var v uint64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil || v > max {
		return 0, r.Want(n, field, fmt.Sprintf("an integer from 0 to %d", max))
	}
	return v, nil
}

// Bool reads true or false.
func (r *Reader) Bool(n *yaml.Node, field string) (bool, error) {
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		return false, r.Want(n, field, "true or false")
	}
	return v, nil
}

// Duration reads a duration as time.ParseDuration does ("1m", "500ms").
func (r *Reader) Duration(n *yaml.Node, field string) (time.Duration, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return 0, r.Want(n, field, "a duration such as 1m or 500ms")
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, r.Errorf(n.Line, field, "want a duration such as 1m or 500ms, got %s", configerr.Quote(n.Value))
	}
	return d, nil
}

// syntaxLine reads the line and the problem from a YAML syntax error. The
// YAML library gives no structured syntax error, only this text; a test
// (TestSyntaxErrorText) pins it, so that an upgrade changing it fails
// loudly.
var syntaxLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// MaxLocateLines bounds the document SyntaxError searches for the line at
// fault, since the search parses every prefix: past it, the line is the
// library's.
const MaxLocateLines = 2000

// SyntaxError turns err, a YAML syntax error in data, into an error with
// its line. The library names the line where the enclosing block began,
// not the one at fault (a badly indented key on line 7 of a mapping opened
// on line 1 is reported on line 1), so the line is found anew: the first
// line at which the document cut there fails with the same problem.
func (r *Reader) SyntaxError(err error, data []byte) *configerr.Error {
	m := syntaxLine.FindStringSubmatch(err.Error())
	if m == nil {
		return &configerr.Error{File: r.File, Reason: strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
	}
	line, _ := strconv.Atoi(m[1])
	if at := locate(data, m[2]); at > 0 {
		line = at
	}
	return &configerr.Error{File: r.File, Line: line, Reason: m[2], Err: err}
}

// locate returns the first line n such that the first n lines of data fail
// to parse with the given problem, or 0 when there is none (or data is
// longer than MaxLocateLines).
func locate(data []byte, problem string) int {
	if bytes.Count(data, []byte("\n")) > MaxLocateLines {
		return 0
	}
	end := 0
	for n := 1; end < len(data); n++ {
		if i := bytes.IndexByte(data[end:], '\n'); i >= 0 {
			end += i + 1
		} else {
			end = len(data)
		}
		var doc yaml.Node
		dec := yaml.NewDecoder(bytes.NewReader(data[:end]))
		err := dec.Decode(&doc)
		for err == nil {
			err = dec.Decode(&doc)
		}
		if errors.Is(err, io.EOF) {
			continue
		}
		if m := syntaxLine.FindStringSubmatch(err.Error()); m != nil && m[2] == problem {
			return n
		}
	}
	return 0
}
