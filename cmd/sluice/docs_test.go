package main

// The docs test: README.md and every page under docs/ show commands,
// configuration and code that work as written. For every fenced block:
//
//   - ```yaml: a gateway configuration (a top-level key of the file serve
//     reads) parses with config.Parse; an envoyproxy/ratelimit file (a
//     top-level domain key) with rlsfile.ParseFile; anything else must be
//     marked yaml-only (it is then only parsed as YAML).
//   - ```go: a whole file (it starts with a package clause), gofmt'd, and
//     every such block compiles against this module. A main program
//     followed by an output block is run and must print that output.
//   - ```sh: every `sluice <command> ...` names a command and flags the
//     binary has, with values its flags accept (the line is parsed by the
//     command itself, with --help added at the end, so nothing runs); every
//     `make <target> [VAR=value]` names a target and a variable of the
//     Makefile. A sluice command followed by an output block is run.
//   - ```json: JSON, or JSON lines. ```text: free text.
//
// A block is marked by an HTML comment on the line before it:
//
//	<!-- docs-test: output -->             this block is what the block before it prints
//	<!-- docs-test: yaml-only: REASON -->  YAML that is not Sluice's (Envoy's own, say)
//	<!-- docs-test: skip: REASON -->       not checked at all; keep these rare
//
// Besides the blocks: every relative link points at a file that exists
// (and at a heading there, when it names one), every --flag the text
// mentions is a flag of some command, every Test, Fuzz, Benchmark or
// Example function it names exists, every page under docs/ starts with
// its title, a one-line summary and a link back to the README, and the
// README links to every page.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"go/format"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/envoyrls/rlsfile"
)

// docsRoot is the repository's root, seen from this package's directory.
const docsRoot = "../.."

// docBlock is one fenced code block of a Markdown file.
type docBlock struct {
	file   string // relative to the repository's root, such as docs/serve.md
	line   int    // the line of the opening fence, from 1
	lang   string // the fence's info string: go, yaml, sh, json or text
	body   string // the lines between the fences, the fence's indent removed
	mark   string // the docs-test marker on the line before, if any: output, yaml-only or skip
	reason string // what follows the marker's colon
}

// where names the block's file and line for a failure message.
func (b docBlock) where() string { return fmt.Sprintf("%s:%d (```%s block)", b.file, b.line, b.lang) }

// docFile is one Markdown file: its text and its fenced blocks.
type docFile struct {
	path   string // relative to the repository's root
	lines  []string
	blocks []docBlock
	prose  []int // the numbers (from 1) of the lines outside fenced blocks
}

// proseText is the file's text with its fenced blocks' lines blanked, so
// that an offset in it still counts the file's lines.
func (f *docFile) proseText() string {
	lines := make([]string, len(f.lines))
	for _, n := range f.prose {
		lines[n-1] = f.lines[n-1]
	}
	return strings.Join(lines, "\n")
}

var (
	fenceRE  = regexp.MustCompile("^(\\s*)```\\s*([A-Za-z0-9_+-]*)\\s*$")
	markerRE = regexp.MustCompile(`^\s*<!--\s*docs-test:\s*([a-z-]+)\s*(?::\s*(.*?))?\s*-->\s*$`)
)

// docsFiles reads README.md and every docs/*.md.
func docsFiles(t *testing.T) []*docFile {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(docsRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no docs/*.md pages found")
	}
	var files []*docFile
	for _, p := range append([]string{filepath.Join(docsRoot, "README.md")}, pages...) {
		rel, err := filepath.Rel(docsRoot, p)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parseDoc(filepath.ToSlash(rel), string(data))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// parseDoc splits a Markdown file into its fenced blocks and its prose.
func parseDoc(path, text string) (*docFile, error) {
	f := &docFile{path: path, lines: strings.Split(text, "\n")}
	for i := 0; i < len(f.lines); i++ {
		m := fenceRE.FindStringSubmatch(f.lines[i])
		if m == nil {
			f.prose = append(f.prose, i+1)
			continue
		}
		b := docBlock{file: path, line: i + 1, lang: m[2]}
		for j := i - 1; j >= 0; j-- {
			if strings.TrimSpace(f.lines[j]) == "" {
				continue
			}
			if mm := markerRE.FindStringSubmatch(f.lines[j]); mm != nil {
				b.mark, b.reason = mm[1], mm[2]
			}
			break
		}
		indent, closed := m[1], false
		var body []string
		for i++; i < len(f.lines); i++ {
			if strings.TrimSpace(f.lines[i]) == "```" {
				closed = true
				break
			}
			body = append(body, strings.TrimPrefix(f.lines[i], indent))
		}
		if !closed {
			return nil, fmt.Errorf("%s:%d: the ```%s block is never closed", path, b.line, b.lang)
		}
		b.body = strings.Join(body, "\n") + "\n"
		f.blocks = append(f.blocks, b)
	}
	return f, nil
}

// TestDocsBlocks checks every fenced block's language and marker, and
// every YAML and JSON block's content.
func TestDocsBlocks(t *testing.T) {
	for _, f := range docsFiles(t) {
		for i, b := range f.blocks {
			switch b.mark {
			case "", "output":
			case "skip", "yaml-only":
				if b.reason == "" {
					t.Errorf("%s: the %s marker must say why", b.where(), b.mark)
				}
			default:
				t.Errorf("%s: unknown marker docs-test: %s (want output, yaml-only or skip)", b.where(), b.mark)
			}
			if b.mark == "output" && (i == 0 || !slices.Contains([]string{"go", "sh"}, f.blocks[i-1].lang)) {
				t.Errorf("%s: an output block must follow a go or sh block", b.where())
			}
			if b.mark == "skip" {
				continue
			}
			switch b.lang {
			case "yaml":
				if err := checkYAMLBlock(b); err != nil {
					t.Errorf("%s: %v", b.where(), err)
				}
			case "json":
				if err := checkJSONBlock(b.body); err != nil {
					t.Errorf("%s: %v", b.where(), err)
				}
			case "go", "sh", "text":
			case "":
				t.Errorf("%s:%d: a fenced block must name its language (go, yaml, sh, json or text)", b.file, b.line)
			default:
				t.Errorf("%s: unknown language %q (want go, yaml, sh, json or text)", b.where(), b.lang)
			}
		}
	}
}

// gatewayKeys are the top-level keys of the configuration file serve reads.
var gatewayKeys = []string{"store", "identity", "on_store_error", "match", "rules", "default", "overrides", "response", "exempt", "server"}

// checkYAMLBlock parses a YAML block as what its content says it is. The
// error's line numbers count from the block's first line.
func checkYAMLBlock(b docBlock) error {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(b.body), &doc); err != nil {
		return fmt.Errorf("not YAML: %v", err)
	}
	if b.mark == "yaml-only" {
		return nil
	}
	var keys []string
	if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		for i := 0; i < len(doc.Content[0].Content); i += 2 {
			keys = append(keys, doc.Content[0].Content[i].Value)
		}
	}
	name := "block"
	switch {
	case slices.Contains(keys, "domain"):
		if _, err := rlsfile.ParseFile(name, []byte(b.body)); err != nil {
			return fmt.Errorf("an envoyproxy/ratelimit file that rlsfile.ParseFile refuses (lines from the block's first): %v", err)
		}
	case slices.ContainsFunc(keys, func(k string) bool { return slices.Contains(gatewayKeys, k) }):
		if _, err := config.Parse(name, []byte(b.body)); err != nil {
			return fmt.Errorf("a gateway configuration that config.Parse refuses (lines from the block's first): %v", err)
		}
	default:
		return fmt.Errorf("top-level keys %q are neither a gateway configuration's (%s) nor an envoyproxy/ratelimit file's (domain); mark it <!-- docs-test: yaml-only: REASON --> if it is another program's", keys, strings.Join(gatewayKeys, ", "))
	}
	return nil
}

// checkJSONBlock accepts one JSON value, or one on each non-blank line.
func checkJSONBlock(body string) error {
	if json.Valid([]byte(body)) {
		return nil
	}
	for i, l := range strings.Split(body, "\n") {
		if strings.TrimSpace(l) != "" && !json.Valid([]byte(l)) {
			return fmt.Errorf("line %d of the block is not JSON: %s", i+1, l)
		}
	}
	return nil
}

// TestDocsGoBlocksCompile compiles every go block against this module,
// as files of packages that exist only in a build overlay, and runs the
// main programs that an output block follows.
//
// It is not parallel, though it judges no deadline: its go commands, most
// of a minute of CPU under make test, then run in the sequential tests
// before the first process test, beside the shared binary's link
// (startBinaryBuild), which leaves a CPU free, rather than starting last
// among the parallel tests and ending the package's run alone.
func TestDocsGoBlocksCompile(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIPPED: no go command on PATH to compile the documentation's Go with")
	}
	root, err := filepath.Abs(docsRoot)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	type goBlock struct {
		docBlock
		src, pkg string // the temporary file and its package's import directory
		output   *docBlock
	}
	var blocks []goBlock
	overlay := map[string]string{}
	for _, f := range docsFiles(t) {
		for i, b := range f.blocks {
			if b.lang != "go" || b.mark == "skip" {
				continue
			}
			if !regexp.MustCompile(`(?m)^package \w+`).MatchString(b.body) {
				t.Errorf("%s: a go block must be a whole file, starting with its package clause, so that it compiles", b.where())
				continue
			}
			if formatted, err := format.Source([]byte(b.body)); err != nil {
				t.Errorf("%s: %v", b.where(), err)
				continue
			} else if string(formatted) != b.body {
				t.Errorf("%s: not gofmt'd; gofmt gives:\n%s", b.where(), formatted)
			}
			n := len(blocks) + 1
			g := goBlock{docBlock: b, src: filepath.Join(tmp, fmt.Sprintf("block%d.go", n)), pkg: fmt.Sprintf("./internal/docsexamples/block%d", n)}
			if i+1 < len(f.blocks) && f.blocks[i+1].mark == "output" {
				g.output = &f.blocks[i+1]
			}
			if err := os.WriteFile(g.src, []byte(b.body), 0o644); err != nil {
				t.Fatal(err)
			}
			overlay[filepath.Join(root, g.pkg, "main.go")] = g.src
			blocks = append(blocks, g)
		}
	}
	if len(blocks) == 0 {
		t.Fatal("no go blocks found: the README's library example should be one")
	}
	ov, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ovPath := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovPath, ov, 0o644); err != nil {
		t.Fatal(err)
	}
	// Compile errors name the temporary file: name the block instead.
	rename := func(out []byte) string {
		s := string(out)
		for _, g := range blocks {
			s = regexp.MustCompile(regexp.QuoteMeta(g.src)+`:(\d+)`).ReplaceAllStringFunc(s, func(m string) string {
				n, _ := strconv.Atoi(m[strings.LastIndexByte(m, ':')+1:])
				return fmt.Sprintf("%s:%d", g.file, g.line+n)
			})
		}
		return s
	}
	goCmd := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, goTool, args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOWORK=off")
		return cmd
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The blocks an output block follows are built, each linked once into
	// binDir (named after its package's directory), to be run; the others
	// are compiled (go list -export runs the compiler on each, as go build
	// does, and fails on the first error) and not linked: a link is most
	// of a small program's build.
	binDir := filepath.Join(tmp, "bin") + string(filepath.Separator)
	build := []string{"build", "-overlay", ovPath, "-ldflags=-w", "-o", binDir}
	compile := []string{"list", "-overlay", ovPath, "-export"}
	for _, g := range blocks {
		if g.output != nil {
			build = append(build, g.pkg)
		} else {
			compile = append(compile, g.pkg)
		}
	}
	for _, args := range [][]string{compile, build} {
		cmd := goCmd(ctx, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr // list's stdout, the packages' paths, is not wanted
		if err := cmd.Run(); err != nil {
			t.Fatalf("the documentation's Go does not compile (%v):\n%s", err, rename(stderr.Bytes()))
		}
	}
	for _, g := range blocks {
		if g.output == nil {
			continue
		}
		if !strings.HasPrefix(g.body, "package main") {
			t.Errorf("%s: an output block follows, but the block is not a main program", g.where())
			continue
		}
		bin := filepath.Join(binDir, filepath.Base(g.pkg))
		runCtx, stop := context.WithTimeout(ctx, time.Minute)
		cmd := exec.CommandContext(runCtx, bin)
		cmd.Dir = tmp
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		stop()
		if err != nil {
			t.Errorf("%s: running it: %v\n%s", g.where(), err, stderr.Bytes())
			continue
		}
		if got, want := strings.TrimRight(stdout.String(), "\n"), strings.TrimRight(g.output.body, "\n"); got != want {
			t.Errorf("%s: prints\n%s\nbut the output block at %s:%d says\n%s", g.where(), got, g.output.file, g.output.line, want)
		}
	}
}

// sluiceFlags returns the flags of a command, read from its -h output:
// for each name, whether it takes a value.
func sluiceFlags(t *testing.T, cmd string) map[string]bool {
	t.Helper()
	flags := map[string]bool{}
	if cmd == "version" {
		return flags
	}
	var stdout, stderr bytes.Buffer
	if status := run([]string{cmd, "-h"}, strings.NewReader(""), &stdout, &stderr); status != 0 {
		t.Fatalf("sluice %s -h: exit status %d\n%s", cmd, status, stderr.Bytes())
	}
	help := stdout.String()
	if i := strings.LastIndex(help, "\nFlags:\n"); i >= 0 {
		help = help[i:]
	}
	// flag.PrintDefaults: "  -name" for a boolean, "  -name value" otherwise.
	re := regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9_-]*)( \S.*)?$`)
	for _, m := range re.FindAllStringSubmatch(help, -1) {
		flags[m[1]] = m[2] != ""
	}
	if len(flags) == 0 {
		t.Fatalf("sluice %s -h lists no flags:\n%s", cmd, stdout.Bytes())
	}
	return flags
}

// allSluiceFlags returns each command's flags.
func allSluiceFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	all := map[string]map[string]bool{}
	for _, c := range commands {
		all[c.name] = sluiceFlags(t, c.name)
	}
	return all
}

// shCommand is one simple command of a sh block: its words, and the
// printf text piped into it, if any.
type shCommand struct {
	words []string
	stdin *string
}

// shCommands splits a sh block into simple commands: continuation lines
// joined, comments dropped, words unquoted, pipelines and lists split,
// redirections and leading variable assignments left out. It knows the
// little of sh that the documentation uses.
func shCommands(body string) ([][]shCommand, error) {
	var lines []string
	cur := ""
	for _, l := range strings.Split(body, "\n") {
		cur += l
		t := strings.TrimSpace(cur)
		switch {
		case strings.HasSuffix(t, "\\"):
			cur = strings.TrimSuffix(strings.TrimRight(cur, " \t"), "\\") + " "
		case strings.HasSuffix(t, "|"), strings.HasSuffix(t, "&&"):
			cur += " "
		default:
			lines = append(lines, cur)
			cur = ""
		}
	}
	if strings.TrimSpace(cur) != "" {
		lines = append(lines, cur)
	}
	var out [][]shCommand
	for _, l := range lines {
		words, err := shWords(l)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", l, err)
		}
		var pipeline []shCommand
		var c shCommand
		var piped *string
		flush := func() {
			// Drop NAME=value assignments before the command.
			for len(c.words) > 0 && regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`).MatchString(c.words[0]) {
				c.words = c.words[1:]
			}
			if len(c.words) > 0 {
				c.stdin = piped
				piped = nil
				if c.words[0] == "printf" && len(c.words) == 2 {
					s := c.words[1]
					piped = &s
				}
				pipeline = append(pipeline, c)
			}
			c = shCommand{}
		}
		for i := 0; i < len(words); i++ {
			switch w := words[i]; w {
			case "|":
				flush()
			case "&&", "||", ";":
				flush()
				out = append(out, pipeline)
				pipeline = nil
			case "<", ">", ">>":
				i++ // the file
			default:
				c.words = append(c.words, w)
			}
		}
		flush()
		if len(pipeline) > 0 {
			out = append(out, pipeline)
		}
	}
	return out, nil
}

// shWords splits a line into words and operators, with sh's single and
// double quotes, and drops a comment.
func shWords(line string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	end := func() {
		if inWord {
			words = append(words, w.String())
			w.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated '")
			}
			w.WriteString(line[i+1 : i+1+j])
			inWord, i = true, i+1+j
		case ch == '"':
			j := strings.IndexByte(line[i+1:], '"')
			if j < 0 {
				return nil, fmt.Errorf("unterminated \"")
			}
			w.WriteString(line[i+1 : i+1+j])
			inWord, i = true, i+1+j
		case ch == '#' && !inWord:
			end()
			return words, nil
		case ch == ' ' || ch == '\t':
			end()
		case strings.ContainsRune("|&;<>", rune(ch)) && !inWord:
			op := string(ch)
			for _, two := range []string{"&&", "||", ">>"} {
				if strings.HasPrefix(line[i:], two) {
					op = two
				}
			}
			words = append(words, op)
			i += len(op) - 1
		default:
			w.WriteByte(ch)
			inWord = true
		}
	}
	end()
	return words, nil
}

// printfText is what printf writes for a format with no directive.
func printfText(format string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		switch c := format[i]; {
		case c == '\\' && i+1 < len(format):
			i++
			switch format[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case '\\':
				b.WriteByte('\\')
			default:
				return "", fmt.Errorf("printf escape \\%c not supported here", format[i])
			}
		case c == '%':
			if i+1 < len(format) && format[i+1] == '%' {
				b.WriteByte('%')
				i++
				continue
			}
			return "", fmt.Errorf("printf directives are not supported here")
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// makefile returns the Makefile's targets and variables.
func makefile(t *testing.T) (targets, vars map[string]bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(docsRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets, vars = map[string]bool{}, map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Za-z0-9_-]+)\s*:([^=]|$)`).FindAllStringSubmatch(string(data), -1) {
		targets[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`(?m)^([A-Za-z_][A-Za-z0-9_]*)\s*[?:+]?=`).FindAllStringSubmatch(string(data), -1) {
		vars[m[1]] = true
	}
	return targets, vars
}

// TestDocsCommands checks every sluice and make command of every sh
// block, and runs those that an output block follows.
func TestDocsCommands(t *testing.T) {
	flagsOf := allSluiceFlags(t)
	targets, vars := makefile(t)
	checked := 0
	for _, f := range docsFiles(t) {
		for i, b := range f.blocks {
			if b.lang != "sh" || b.mark == "skip" {
				continue
			}
			var output *docBlock
			if i+1 < len(f.blocks) && f.blocks[i+1].mark == "output" {
				output = &f.blocks[i+1]
			}
			pipelines, err := shCommands(b.body)
			if err != nil {
				t.Errorf("%s: %v", b.where(), err)
				continue
			}
			ran := false
			for _, p := range pipelines {
				for _, c := range p {
					switch {
					case filepath.Base(c.words[0]) == "sluice":
						checked++
						if err := checkSluiceCommand(c.words[1:], flagsOf); err != nil {
							t.Errorf("%s: %s: %v", b.where(), strings.Join(c.words, " "), err)
							continue
						}
						if output != nil {
							ran = true
							if err := runSluiceCommand(c, output); err != nil {
								t.Errorf("%s: %s: %v", b.where(), strings.Join(c.words, " "), err)
							}
						}
					case c.words[0] == "make":
						checked++
						for _, a := range c.words[1:] {
							if name, _, ok := strings.Cut(a, "="); ok {
								if !vars[name] {
									t.Errorf("%s: make %s: the Makefile has no variable %s", b.where(), a, name)
								}
							} else if !strings.HasPrefix(a, "-") && !targets[a] {
								t.Errorf("%s: make %s: the Makefile has no target %s", b.where(), a, a)
							}
						}
					}
				}
			}
			if output != nil && !ran {
				t.Errorf("%s: an output block follows, but the block runs no sluice command", b.where())
			}
		}
	}
	if checked == 0 {
		t.Fatal("no sluice or make command found in any sh block")
	}
}

// checkSluiceCommand checks that args (the words after "sluice") name a
// command and flags that exist, then has the command parse them itself
// with --help added, which stops it before it does anything: a value its
// flags refuse is an error too.
func checkSluiceCommand(args []string, flagsOf map[string]map[string]bool) error {
	if len(args) == 0 {
		return fmt.Errorf("no command")
	}
	flags, ok := flagsOf[args[0]]
	if !ok {
		return fmt.Errorf("sluice has no command %q", args[0])
	}
	if args[0] == "version" {
		if len(args) > 1 {
			return fmt.Errorf("sluice version takes no arguments")
		}
		return nil
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for name, takesValue := range flags {
		if takesValue {
			fs.String(name, "", "")
		} else {
			fs.Bool(name, false, "")
		}
	}
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("sluice %s: %v", args[0], err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("sluice %s takes no argument %q", args[0], fs.Arg(0))
	}
	var stdout, stderr bytes.Buffer
	if status := run(append(slices.Clone(args), "--help"), strings.NewReader(""), &stdout, &stderr); status != 0 {
		msg := stdout.String() + stderr.String()
		if i := strings.Index(msg, "Usage:"); i >= 0 {
			msg = msg[:i] // the error, not the help after it
		}
		return fmt.Errorf("the command refuses these flags (exit status %d): %s", status, strings.TrimSpace(msg))
	}
	return nil
}

// runSluiceCommand runs a sluice command in this process, with the printf
// text piped into it as its stdin, and compares what it prints with the
// output block.
func runSluiceCommand(c shCommand, output *docBlock) error {
	stdin := ""
	if c.stdin != nil {
		s, err := printfText(*c.stdin)
		if err != nil {
			return err
		}
		stdin = s
	}
	var stdout, stderr bytes.Buffer
	if status := run(c.words[1:], strings.NewReader(stdin), &stdout, &stderr); status != 0 {
		return fmt.Errorf("exit status %d\n%s", status, stderr.Bytes())
	}
	if got, want := strings.TrimRight(stdout.String(), "\n"), strings.TrimRight(output.body, "\n"); got != want {
		return fmt.Errorf("prints\n%s\nbut the output block at %s:%d says\n%s", got, output.file, output.line, want)
	}
	return nil
}

// TestDocsFlagsInText checks that every --flag the prose mentions is a
// flag of some sluice command (--redis-* standing for those it starts).
func TestDocsFlagsInText(t *testing.T) {
	known := map[string]bool{"help": true}
	for _, flags := range allSluiceFlags(t) {
		for name := range flags {
			known[name] = true
		}
	}
	re := regexp.MustCompile(`(^|[^-\w])--([a-z][a-z0-9-]*)(\*?)`)
	for _, f := range docsFiles(t) {
		for _, n := range f.prose {
			for _, m := range re.FindAllStringSubmatch(f.lines[n-1], -1) {
				name, prefix := m[2], m[3] == "*"
				ok := known[name]
				if prefix {
					for k := range known {
						ok = ok || strings.HasPrefix(k, name)
					}
				}
				if !ok {
					t.Errorf("%s:%d: --%s%s is no flag of any sluice command", f.path, n, name, m[3])
				}
			}
		}
	}
}

// TestDocsNamedTestsExist checks that every Test, Fuzz, Benchmark or
// Example function the text names (bare, or as pkg.Name) is defined in a
// test file of the repository (the bench module included), in that
// package's directory when one is named.
func TestDocsNamedTestsExist(t *testing.T) {
	defined := map[string][]string{} // name → the directories defining it
	funcRE := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark|Example)\w*)\(`)
	err := filepath.WalkDir(docsRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range funcRE.FindAllStringSubmatch(string(data), -1) {
			defined[m[1]] = append(defined[m[1]], filepath.Base(filepath.Dir(path)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?:\b([a-z][a-z0-9]*)\.)?\b((?:Test|Fuzz|Benchmark|Example)[A-Z][A-Za-z0-9_]*)`)
	for _, f := range docsFiles(t) {
		for _, n := range f.prose {
			for _, m := range re.FindAllStringSubmatch(f.lines[n-1], -1) {
				pkg, name := m[1], m[2]
				dirs, ok := defined[name]
				switch {
				case !ok:
					t.Errorf("%s:%d: %s is not defined in any test file", f.path, n, name)
				case pkg != "" && !slices.Contains(dirs, pkg):
					t.Errorf("%s:%d: %s.%s: %s is defined in %v, not in %s", f.path, n, pkg, name, name, dirs, pkg)
				}
			}
		}
	}
}

// TestDocsLinks checks every relative link and image of the README and
// the pages: the file exists and, for a link into a Markdown file with a
// #fragment, so does the heading.
func TestDocsLinks(t *testing.T) {
	files := docsFiles(t)
	linkRE := regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	anchors := map[string]map[string]bool{} // by path from the root
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		data, err := os.ReadFile(filepath.Join(docsRoot, path))
		if err != nil {
			return nil
		}
		f, err := parseDoc(path, string(data))
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = headingSlugs(f)
		return anchors[path]
	}
	pages := map[string]bool{}
	for _, f := range files {
		if strings.HasPrefix(f.path, "docs/") {
			pages[f.path] = false
		}
	}
	for _, f := range files {
		// Links may wrap: match over the prose, fenced blocks blanked.
		prose := f.proseText()
		for _, loc := range linkRE.FindAllStringSubmatchIndex(prose, -1) {
			n := 1 + strings.Count(prose[:loc[0]], "\n")
			target := prose[loc[2]:loc[3]]
			if regexp.MustCompile(`^[a-z]+:`).MatchString(target) {
				continue // http:, https:, mailto:
			}
			file, frag, _ := strings.Cut(target, "#")
			path := f.path
			if file != "" {
				path = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(f.path), file)))
			}
			if _, err := os.Stat(filepath.Join(docsRoot, path)); err != nil {
				t.Errorf("%s:%d: the link %s points at %s, which does not exist", f.path, n, target, path)
				continue
			}
			if f.path == "README.md" {
				if _, ok := pages[path]; ok {
					pages[path] = true
				}
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[frag] {
				t.Errorf("%s:%d: the link %s names #%s, which is no heading of %s", f.path, n, target, frag, path)
			}
		}
	}
	for p, linked := range pages {
		if !linked {
			t.Errorf("README.md links nowhere to %s", p)
		}
	}
}

// headingSlugs returns the anchors GitHub gives a Markdown file's
// headings: lower case, punctuation dropped, spaces as hyphens, a repeated
// one numbered.
func headingSlugs(f *docFile) map[string]bool {
	slugs, seen := map[string]bool{}, map[string]int{}
	for _, n := range f.prose {
		l := f.lines[n-1]
		if !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		s := b.String()
		if k := seen[s]; k > 0 {
			slugs[fmt.Sprintf("%s-%d", s, k)] = true
		} else {
			slugs[s] = true
		}
		seen[s]++
	}
	return slugs
}

// TestDocsPagesStartWithASummary checks that every page under docs/
// opens with its title, a one-line summary and a link back to the README.
func TestDocsPagesStartWithASummary(t *testing.T) {
	for _, f := range docsFiles(t) {
		if !strings.HasPrefix(f.path, "docs/") {
			continue
		}
		if len(f.lines) < 4 || !strings.HasPrefix(f.lines[0], "# ") || f.lines[1] != "" || f.lines[2] == "" || f.lines[3] != "" {
			t.Errorf("%s:1: a page starts with \"# Title\", a blank line, a one-line summary and a blank line", f.path)
			continue
		}
		if !strings.Contains(f.lines[2], "](../README.md)") {
			t.Errorf("%s:3: the summary line links back to the README ([Back to the README](../README.md))", f.path)
		}
	}
}

// TestDocsREADMELength keeps the README a front page.
func TestDocsREADMELength(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(docsRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > 300 {
		t.Errorf("README.md has %d lines; a front page has at most 300: move the detail to a page under docs/", n)
	}
}
