package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sluice-go/sluice/backend/redis/redistest"
)

// sortedKeys returns redisKeys sorted.
func sortedKeys(t *testing.T, rs *redistest.Server, prefix string) []string {
	t.Helper()
	keys := redisKeys(t, rs, prefix)
	slices.Sort(keys)
	return keys
}

// /v1/usage through a real serve process on a real redis-server: the
// admin's usage of a spent caller and of one never seen, each equal to
// what the next request sees, and neither writing a key (the server's
// keys under the process's prefix are the same before and after, read
// with redis-cli); the customer listener's the same.
func TestServeProcessUsageOnRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	rs := redistest.Start(t)
	bin := buildBinary(t)
	up := upstream(t)
	dir := t.TempDir()
	pfx := testPrefix(t)
	cfgPath := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfgPath, fmt.Sprintf("store:\n  backend: redis\n  redis:\n    addrs: [%s]\n    key_prefix: %q\n", rs.Addr, pfx)+usageConfig)
	const token = "0123456789abcdef0123456789abcdef"
	tokenPath := filepath.Join(dir, "token")
	writeFile(t, tokenPath, token+"\n")
	p := startServeProcess(t, bin, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL,
		"--admin", "127.0.0.1:0", "--admin-token-file", tokenPath, "--usage-listen", "127.0.0.1:0")
	m := usageAddrRE.FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no admin and usage addresses in the log:\n%s", p.stderr)
	}
	admin, own := "http://"+m[1], "http://"+m[2]
	orders := "http://" + p.listen + "/api/orders"

	if got := codes(t, 4, "POST", orders, "X-User-ID", "alice"); fmt.Sprint(got) != "[200 200 200 429]" {
		t.Fatalf("alice's orders: %v", got)
	}
	before := sortedKeys(t, rs, pfx)
	if len(before) == 0 {
		t.Fatalf("no key under %q after alice's orders: the checks below would see nothing", pfx)
	}

	_, by := decodeUsage(t, mustOK(t, token, admin+"/v1/usage?user=alice&ip=127.0.0.1"))
	if o := by["orders"]; o.Key != "user:alice" || o.Remaining != 0 || o.Allowed || o.RetryAfterSeconds <= 0 || o.Limit != 3 {
		t.Errorf("alice's orders: %+v, want none left, denied, a retry", o)
	}
	code, body := authGet(t, "", own+"/v1/usage", "X-User-ID", "alice")
	if _, by := decodeUsage(t, body); code != http.StatusOK || by["orders"].Remaining != 0 || by["orders"].Allowed {
		t.Errorf("own usage of alice: %d %s, want none left", code, body)
	}
	if code, h := send(t, "POST", orders, "X-User-ID", "alice"); code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Errorf("alice's next order after usage said none is left: %d, Retry-After %q", code, h.Get("Retry-After"))
	}

	// zed has spent nothing: his usage, by the admin and by himself, says
	// 3 and writes no key; his next order leaves 2.
	_, by = decodeUsage(t, mustOK(t, token, admin+"/v1/usage?user=zed&ip=127.0.0.1"))
	if o := by["orders"]; o.Remaining != 3 || !o.Allowed {
		t.Errorf("zed: %+v, want 3 left", o)
	}
	code, body = authGet(t, "", own+"/v1/usage", "X-User-ID", "zed")
	if _, by := decodeUsage(t, body); code != http.StatusOK || by["orders"].Remaining != 3 {
		t.Errorf("own usage of zed: %d %s, want 3 left", code, body)
	}
	after := sortedKeys(t, rs, pfx)
	if !slices.Equal(before, after) {
		t.Fatalf("usage of a caller never seen changed the keys on Redis: %q, then %q", before, after)
	}
	if _, h := send(t, "POST", orders, "X-User-ID", "zed"); h.Get("X-RateLimit-Remaining") != "2" {
		t.Errorf("zed's first order left %q, want 2", h.Get("X-RateLimit-Remaining"))
	}
	if keys := sortedKeys(t, rs, pfx); len(keys) != len(before)+1 {
		t.Errorf("after zed's order, keys %q (before %q): want one more, his (the check sees the process's writes)", keys, before)
	}
}
