package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/config"
)

// A Redis that refuses the login (a wrong password, or none where one is
// required) is reported as such by the commands' store opening, and by
// `sluice inspect`: the login was refused, check the password; not that
// Redis does not answer.
func TestRedisRefusedLoginMessage(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	rs.Do(t, "CONFIG", "SET", "requirepass", "right-password")
	for _, password := range []string{"wrong-password", ""} {
		r := defaultRedis()
		r.Addrs, r.Password, r.Timeout = []string{rs.Addr}, password, time.Second
		b, _, err := openBackend(backendFlags{name: config.BackendRedis, redis: r})
		if err == nil {
			b.Close()
			t.Fatalf("password %q: the store opened", password)
		}
		msg := err.Error()
		if !strings.Contains(msg, "login refused") || !strings.Contains(msg, "password") || strings.Contains(msg, "is it running") || strings.Contains(msg, "does not answer") {
			t.Errorf("password %q: %q; want that the login was refused, pointing at the password, not that Redis does not answer", password, msg)
		}
	}

	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	writeFile(t, cfg, fmt.Sprintf(`store:
  backend: redis
  redis:
    addrs: [%s]
    password: wrong-password
rules:
  - {name: orders, path_prefix: /, scope: ip, algorithm: token_bucket, limit: 5, window: 1m}
`, rs.Addr))
	code, _, stderr := runCmd(t, "", "inspect", "--config", cfg)
	if code != 1 || !strings.Contains(stderr, "login refused") || strings.Contains(stderr, "is it running") {
		t.Errorf("inspect with a wrong password: exit %d, %q; want 1 and that the login was refused", code, stderr)
	}
}
