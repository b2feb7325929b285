package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
	_ "time/tzdata" // the IANA zones calendar rules name, on a host without a zone database
)

// command is one subcommand of the binary.
type command struct {
	name    string
	summary string
	// run executes the command with its arguments (the words after its
	// name) and returns the process's exit status.
	run func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// commands lists the subcommands in the order the usage message shows them.
var commands = []command{
	{"demo", "show a rate-limited gateway at work and its budgets surviving a restart", runDemo},
	{"simulate", "decide a JSON-lines trace of requests read from stdin", runSimulate},
	{"serve", "run a rate-limiting reverse proxy in front of an HTTP service", runServeCmd},
	{"rls", "serve Envoy's external rate-limit protocol from envoyproxy/ratelimit's configuration files", runRLSCmd},
	{"replay", "decide an access log under a rules file: who would have been denied, and what limit fits", runReplay},
	{"inspect", "list the records a durable store holds (on Pebble or bbolt, stop the process using it first)", runInspect},
	{"reset", "unblock a caller: forget its record under a rule (a Pebble or bbolt store stopped; Redis as it runs)", runReset},
	{"version", "print the version of this build", runVersion},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run dispatches args (the command line without the program name) to a
// subcommand and returns the exit status: 0 on success, 2 for a usage
// error, 1 for any other failure.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-version", "--version":
		return runVersion(nil, stdin, stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && name == "help" {
			return run([]string{args[1], "-h"}, stdin, stdout, stderr)
		}
		usage(stdout)
		return 0
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(args[1:], stdin, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", name)
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, "Sluice is a rate limiter for Go: a library, and this binary.\n\nUsage:\n\n\tsluice <command> [flags]\n\nThe commands are:\n\n")
	for _, c := range commands {
		fmt.Fprintf(w, "\t%-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun \"sluice <command> -h\" for a command's flags.\n")
}

// runVersion is the version command: the module's version (or "(devel)"
// for a build from a source tree), the commit and its time when the build
// recorded them, and the Go version and platform.
func runVersion(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: sluice version\n\nPrints the version of this build: the module's version, the commit, the Go version and the platform. It takes no flags.\n")
	}
	if status, done := parseArgs(fs, args, stdout); done {
		return status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice version: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	fmt.Fprintln(stdout, versionLine())
	return 0
}

// stampedCommit is the commit `make build` stamps into the binary
// (-ldflags -X main.stampedCommit=...), for a build whose environment
// leaves the version control information out (GOFLAGS=-buildvcs=false).
var stampedCommit string

// versionLine describes this build in one line.
func versionLine() string {
	version, commit := "(unknown)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		var rev, when, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = ", modified"
				}
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			commit = fmt.Sprintf(" (commit %s %s%s)", rev, when, dirty)
		}
	}
	if commit == "" && stampedCommit != "" {
		commit = fmt.Sprintf(" (commit %s)", stampedCommit)
	}
	return fmt.Sprintf("sluice %s%s %s %s/%s", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// failer returns a command's way out on a usage or set-up error: it writes
// "prefix: " and the message to w and returns status.
func failer(w io.Writer, prefix string) func(status int, format string, a ...any) int {
	return func(status int, format string, a ...any) int {
		fmt.Fprintf(w, prefix+": "+format+"\n", a...)
		return status
	}
}

// exitStatus is the exit status of a set-up error: 2 for a usage error,
// 1 for anything else.
func exitStatus(err error) int {
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// parseArgs parses args into fs, whose Usage is set: asked for with -h or
// --help, the help goes to stdout (it is the output) and parseArgs reports
// exit status 0; any other parse error is printed with one line pointing to
// the help, and reports 2. done is false when the command should go on.
func parseArgs(fs *flag.FlagSet, args []string, stdout io.Writer) (status int, done bool) {
	help := false
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			fs.SetOutput(stdout)
			help = true
		}
	}
	if !help {
		// A mistyped flag gets its error, named by the command as every
		// other error is, and one line, not the whole usage, which would
		// scroll the error out of sight.
		out, full := fs.Output(), fs.Usage
		fs.SetOutput(io.Discard)
		fs.Usage = func() {}
		defer func() { fs.SetOutput(out); fs.Usage = full }()
		if err := parseFlags(fs, args); err != nil {
			fmt.Fprintf(out, "sluice %s: %v\nRun 'sluice %s -h' for its flags.\n", fs.Name(), err, fs.Name())
			return 2, true
		}
		return 0, false
	}
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	return 0, false
}

// parseFlags parses args into fs, an error naming an unknown flag with
// the flag most likely meant (flagHint). Every command parses through it.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return flagHint(fs, err)
	}
	return nil
}

// flagHint returns err, a parse error of fs, with the flag the caller most
// likely meant when err names a flag fs does not define and one of fs's is
// at most two edits from it: "(did you mean --config?)"; and with the form
// a duration takes when err is a duration flag's value that does not parse
// (the flag package says only "parse error" of "--send-timeout 60").
func flagHint(fs *flag.FlagSet, err error) error {
	if rest, ok := strings.CutPrefix(err.Error(), "invalid value "); ok {
		if _, name, ok := strings.Cut(rest, " for flag -"); ok {
			name, _, _ = strings.Cut(name, ":")
			if f := fs.Lookup(name); f != nil {
				if g, ok := f.Value.(flag.Getter); ok {
					if _, ok := g.Get().(time.Duration); ok {
						return fmt.Errorf("%w (want a number with its unit, such as 60s, 500ms or 1m30s)", err)
					}
				}
			}
		}
		return err
	}
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: ")
	if !ok {
		return err
	}
	name = strings.TrimLeft(name, "-")
	best, least := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		if d := edits(name, f.Name); d < least {
			best, least = f.Name, d
		}
	})
	if best == "" {
		return err
	}
	return fmt.Errorf("%w (did you mean --%s?)", err, best)
}

// edits is the number of single-byte insertions, deletions, substitutions
// and swaps of neighbours that turn a into b (optimal string alignment).
func edits(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j]; three rows suffice.
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
