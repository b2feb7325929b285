package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/backend/bolt"
)

// serve checks its flags and its configuration file before it opens the
// store: with a store that cannot be opened (another process holds it),
// a bad --listen or a broken file is the error reported (exit 2), not the
// store's; with both right, the store's error is (exit 1).
func TestServeChecksFlagsAndConfigBeforeTheStore(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	held, err := bolt.Open(dir, &bolt.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	good := filepath.Join(t.TempDir(), "good.yaml")
	writeFile(t, good, fmt.Sprintf(`store:
  backend: bolt
  dir: %s
rules:
  - {name: orders, path_prefix: /, scope: ip, algorithm: token_bucket, limit: 5, window: 1m}
`, dir))
	broken := filepath.Join(t.TempDir(), "broken.yaml")
	writeFile(t, broken, fmt.Sprintf(`store:
  backend: bolt
  dir: %s
rules:
  - {name: orders, path_prefix: /, scope: ip, algorithm: token_bukket, limit: 5, window: 1m}
`, dir))
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		want     string
		unwanted string
	}{
		{"bad --listen", []string{"--config", good, "--listen", "nonsense", "--upstream", "http://127.0.0.1:1"}, 2, "--listen nonsense", "lock"},
		{"bad --upstream", []string{"--config", good, "--listen", "127.0.0.1:0", "--upstream", "ftp://x"}, 2, "--upstream", "lock"},
		{"broken file", []string{"--config", broken, "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"}, 2, "token_bukket", "lock"},
		{"broken file, store by flag", []string{"--config", broken, "--backend", "bolt", "--dir", dir, "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"}, 2, "token_bukket", "lock"},
		{"bad TLS flag", []string{"--config", good, "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--tls-cert", filepath.Join(dir, "missing.pem"), "--tls-key", filepath.Join(dir, "missing.key")}, 0, "missing.pem", "lock"},
		{"all right: the store's error", []string{"--config", good, "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"}, 1, "lock", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCmd(t, "", append([]string{"serve"}, tc.args...)...)
			switch {
			case tc.code != 0 && code != tc.code, tc.code == 0 && code == 0:
				t.Errorf("exit %d, want %d: %s", code, tc.code, stderr)
			case !strings.Contains(stderr, tc.want):
				t.Errorf("stderr %q does not name %q", stderr, tc.want)
			case tc.unwanted != "" && strings.Contains(strings.ToLower(stderr), tc.unwanted):
				t.Errorf("stderr %q reports the store before the mistake", stderr)
			}
		})
	}
}
