package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// replayDir is the replay package, whose testdata holds the committed logs
// and their golden reports.
const replayDir = "../../replay"

// A real sluice replay process over the committed logs prints the golden
// report (the same the replay package's tests check), writes the HTML
// report, and draws its progress on stderr when asked.
func TestReplayProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	golden := func(name string) string {
		b, err := os.ReadFile(filepath.Join(replayDir, "testdata", "golden", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cases := []struct {
		name   string
		args   []string
		golden string
	}{
		{"combined", []string{"--config", "testdata/rules.yaml", "--against", "testdata/rules-relaxed.yaml",
			"--log", "testdata/logs/access.log", "--log", "testdata/logs/access-2.log.gz", "--combined-extra", "xff,user"}, "combined"},
		{"json", []string{"--config", "testdata/rules-all.yaml", "--log", "testdata/logs/api.jsonl"}, "json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(bin, append(append([]string{"replay"}, c.args...), "--report", dir, "--progress")...)
			cmd.Dir = replayDir
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("sluice replay: %v; stderr:\n%s", err, stderr.String())
			}
			want := golden(c.golden+".txt") + "\nReport written to " + dir + "\n"
			if got := stdout.String(); got != want {
				t.Errorf("stdout differs from testdata/golden/%s.txt:\n%s", c.golden, got)
			}
			if !strings.HasSuffix(stderr.String(), "100%\n") || !strings.Contains(stderr.String(), "\rreplaying [") {
				t.Errorf("stderr %q: want a progress bar ending at 100%%", stderr.String())
			}
			got, err := os.ReadFile(filepath.Join(dir, "index.html"))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != golden(filepath.Join(c.golden, "index.html")) {
				t.Errorf("index.html differs from testdata/golden/%s/index.html", c.golden)
			}
		})
	}
}

// Usage errors exit 2 naming the flag or the file's line; a log that
// cannot be opened exits 1; a log of bad lines is reported, not fatal.
func TestReplayErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rules := filepath.Join(replayDir, "testdata", "rules.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("rules:\n  - name: x\n    path_prefix: /\n    scope: ip\n    algorithm: token_bucket\n    limit: 5\n    window: 1 minute\n"), 0o644)
	garbage := filepath.Join(dir, "garbage.log")
	os.WriteFile(garbage, []byte("not a log line\nnor this\n"), 0o644)
	// 3,000 lines (4 of them bad) and 20 bad ones more (0.8%), or 60 (2.1%).
	good, err := os.ReadFile(filepath.Join(replayDir, "testdata", "logs", "access.log"))
	if err != nil {
		t.Fatal(err)
	}
	someBad, manyBad := filepath.Join(dir, "some-bad.log"), filepath.Join(dir, "many-bad.log")
	os.WriteFile(someBad, append(append([]byte{}, good...), strings.Repeat("garbage\n", 20)...), 0o644)
	os.WriteFile(manyBad, append(append([]byte{}, good...), strings.Repeat("garbage\n", 60)...), 0o644)
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"help", []string{"replay", "-h"}, 0, "Usage: sluice replay", ""},
		{"listed", []string{"help"}, 0, "replay", ""},
		{"no config", []string{"replay", "--log", garbage}, 2, "", "--config is required"},
		{"no log", []string{"replay", "--config", rules}, 2, "", "--log is required"},
		{"share", []string{"replay", "--config", rules, "--log", garbage, "--share", "1.5"}, 2, "", "--share: want a share above 0"},
		{"format", []string{"replay", "--config", rules, "--log", garbage, "--format", "w3c"}, 2, "", `--format: want auto, combined or json, got "w3c"`},
		{"extra", []string{"replay", "--config", rules, "--log", garbage, "--combined-extra", "xff,cookie"}, 2, "", `--combined-extra: unknown field "cookie"`},
		{"json fields", []string{"replay", "--config", rules, "--log", garbage, "--json-fields", "when=ts"}, 2, "", "--json-fields: want meaning=key"},
		{"bad rules", []string{"replay", "--config", bad, "--log", garbage}, 2, "", "bad.yaml:7: rules[0].window"},
		{"bad against", []string{"replay", "--config", rules, "--against", bad, "--log", garbage}, 2, "", "bad.yaml:7: rules[0].window"},
		{"missing log", []string{"replay", "--config", rules, "--log", filepath.Join(dir, "nope.log")}, 1, "", "nope.log"},
		// A log of which no line parses: the report, then exit 1.
		{"no line parses", []string{"replay", "--config", rules, "--log", garbage}, 1, "garbage.log:2: sluice/replay: line does not parse", "no line of the logs parsed (2 lines, 2 bad): nothing was replayed; check --format (given: --format auto, which read them as combined)"},
		{"no line parses as json", []string{"replay", "--config", rules, "--log", garbage, "--format", "json"}, 1, "garbage.log:2: sluice/replay: line does not parse", "check --format (given: --format json) and, for JSON, --json-fields"},
		{"usage states exit 1", []string{"replay", "-h"}, 0, "1 when a log\ncannot be opened or the report not written, and when no line of the logs\nparsed or more than --max-bad of them did not", ""},
		{"some bad lines", []string{"replay", "--config", rules, "--log", someBad}, 0, "does not parse", ""},
		{"too many bad lines", []string{"replay", "--config", rules, "--log", manyBad}, 1, "does not parse", "64 of 3060 lines did not parse (2.1%), more than --max-bad allows (1%)"},
		{"bad lines allowed", []string{"replay", "--config", rules, "--log", manyBad, "--max-bad", "0.05"}, 0, "does not parse", ""},
		{"max-bad", []string{"replay", "--config", rules, "--log", garbage, "--max-bad", "2"}, 2, "", "--max-bad: want a share from 0 to 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(t, "", tt.args...)
			if code != tt.wantCode || !strings.Contains(stdout, tt.wantStdout) || !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q in stdout, %q in stderr", code, stdout, stderr, tt.wantCode, tt.wantStdout, tt.wantStderr)
			}
		})
	}
}
