package redis_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/backend/redis/redistest"
)

// The package's tests share one standalone server and one 3-node Cluster,
// started on first use and killed when the tests end; each test keeps to
// keys under a prefix of its own.
var (
	shared struct {
		once       sync.Once
		server     *redistest.Server
		err        error
		cOnce      sync.Once
		cluster    *redistest.Cluster
		clusterErr error
	}
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.server != nil {
		shared.server.Kill()
	}
	if shared.cluster != nil {
		shared.cluster.Kill()
	}
	os.Exit(code)
}

// server returns the shared standalone server, skipping the test when
// redis-server is missing.
func server(t testing.TB) *redistest.Server {
	t.Helper()
	redistest.Skip(t)
	shared.once.Do(func() { shared.server, shared.err = redistest.NewServer() })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.server
}

// cluster returns the shared 3-node Cluster.
func cluster(t testing.TB) *redistest.Cluster {
	t.Helper()
	redistest.Skip(t)
	shared.cOnce.Do(func() { shared.cluster, shared.clusterErr = redistest.NewCluster(3) })
	if shared.clusterErr != nil {
		t.Fatal(shared.clusterErr)
	}
	return shared.cluster
}

// prefix is a key prefix of the test's own.
func prefix(t testing.TB) string {
	return strings.NewReplacer("/", ":", " ", "_").Replace(t.Name()) + ":"
}

// open opens a store on addrs under the test's prefix (and a sequence
// number, so that a test opening several fresh stores gets empty ones),
// closed when the test ends.
func open(t testing.TB, addrs []string, o redis.Options) *redis.Store {
	t.Helper()
	if o.KeyPrefix == "" {
		opened++
		o.KeyPrefix = fmt.Sprintf("%s%d:", prefix(t), opened)
	}
	if o.Timeout == 0 {
		o.Timeout = testTimeout
	}
	s, err := redis.Open(redis.ClientOptions{Addrs: addrs}, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var opened int

// testTimeout is the call deadline in tests: the default 50ms is right for
// a gateway next to its Redis, but a race-detector build on a loaded
// 2-core machine can take longer than that to schedule a reply.
const testTimeout = 2e9

// client returns a go-redis client of the test's own on addr.
func client(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return c
}
