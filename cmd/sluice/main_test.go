package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

// runCmd runs the binary's run function in-process.
func runCmd(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRunDispatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"no command", nil, 2, "", "sluice <command>"},
		{"help", []string{"help"}, 0, "simulate", ""},
		{"-h", []string{"-h"}, 0, "demo", ""},
		{"help simulate", []string{"help", "simulate"}, 0, "--algorithm", ""},
		{"simulate -h", []string{"simulate", "-h"}, 0, "Usage: sluice simulate", ""},
		{"demo -h", []string{"demo", "--help"}, 0, "Usage: sluice demo", ""},
		{"unknown command", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{"demo with an argument", []string{"demo", "extra"}, 2, "", `unexpected argument "extra"`},
		{"demo with an unknown flag", []string{"demo", "--verbose"}, 2, "", "-verbose"},
		{"demo on redis", []string{"demo", "--backend", "redis"}, 2, "", "--backend redis: the demo runs on pebble, bolt or memory"},
		{"version", []string{"version"}, 0, "sluice ", ""},
		{"--version", []string{"--version"}, 0, runtime.Version(), ""},
		{"version with an argument", []string{"version", "x"}, 2, "", `unexpected argument "x"`},
		{"version -h", []string{"version", "-h"}, 0, "Usage: sluice version", ""},
		{"help version", []string{"help", "version"}, 0, "Usage: sluice version", ""},
		{"help lists version", []string{"help"}, 0, "version", ""},
		{"serve --help explains reload", []string{"serve", "--help"}, 0, "SIGHUP", ""},
		{"serve --help names the admin endpoints", []string{"serve", "--help"}, 0, "/healthz", ""},
		{"serve with a bad flag names it", []string{"serve", "--listn", ":1"}, 2, "", "sluice serve: flag provided but not defined: -listn (did you mean --listen?)\nRun 'sluice serve -h' for its flags.\n"},
		{"serve offers no flag far from a mistyped one", []string{"serve", "--verbose"}, 2, "", "not defined: -verbose\nRun"},
		{"rls offers the flag meant", []string{"rls", "--redis-timout", "1s"}, 2, "", "-redis-timout (did you mean --redis-timeout?)"},
		{"reset offers the flag meant", []string{"reset", "--ky", "a"}, 2, "", "-ky (did you mean --key?)"},
		{"replay offers the flag meant", []string{"replay", "--cnofig", "x"}, 2, "", "-cnofig (did you mean --config?)"},
		{"inspect offers the flag meant", []string{"inspect", "--bakend", "pebble"}, 2, "", "-bakend (did you mean --backend?)"},
		{"simulate offers the flag meant", []string{"simulate", "--limt", "3"}, 2, "", "-limt (did you mean --limit?)"},
		{"demo offers the flag meant", []string{"demo", "--resme"}, 2, "", "-resme (did you mean --resume?)"},
		{"a duration without its unit says the form", []string{"serve", "--send-timeout", "60"}, 2, "", `invalid value "60" for flag -send-timeout: parse error (want a number with its unit, such as 60s, 500ms or 1m30s)`},
		{"rls says it too", []string{"rls", "--reload-settle", "1"}, 2, "", "-reload-settle: parse error (want a number with its unit"},
		{"a number flag's bad value gets no duration hint", []string{"serve", "--max-connections", "1.5"}, 2, "", "-max-connections: parse error\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCmd(t, "", tt.args...)
			if code != tt.wantCode {
				t.Errorf("run(%q) = %d, want %d; stderr:\n%s", tt.args, code, tt.wantCode, stderr)
			}
			if !strings.Contains(stdout, tt.wantStdout) {
				t.Errorf("run(%q) stdout = %q, want it to contain %q", tt.args, stdout, tt.wantStdout)
			}
			if !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("run(%q) stderr = %q, want it to contain %q", tt.args, stderr, tt.wantStderr)
			}
		})
	}
}

func TestEdits(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"config", "config", 0},
		{"", "key", 3},
		{"confg", "config", 1},    // a deletion
		{"configg", "config", 1},  // an insertion
		{"cinfig", "config", 1},   // a substitution
		{"cnofig", "config", 1},   // neighbours swapped
		{"verbose", "version", 4}, // too far to offer
		{"listn", "listen", 1},
		{"redis-timout", "redis-timeout", 1},
	} {
		if got := edits(tt.a, tt.b); got != tt.want {
			t.Errorf("edits(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := edits(tt.b, tt.a); got != tt.want {
			t.Errorf("edits(%q, %q) = %d, want %d", tt.b, tt.a, got, tt.want)
		}
	}
}
