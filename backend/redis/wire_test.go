package redis_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/engine"
)

// netBytes returns the server's total_net_input_bytes and
// total_net_output_bytes.
func netBytes(t *testing.T, srv *redistest.Server) (in, out int64) {
	t.Helper()
	for _, line := range strings.Split(srv.Do(t, "INFO", "stats"), "\n") {
		name, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch name {
		case "total_net_input_bytes":
			in = n
		case "total_net_output_bytes":
			out = n
		}
	}
	return in, out
}

// TestBytesOnTheWire measures what one allowed decision sends and receives,
// for every algorithm at a limit of 1,000 with 500 units spent, and checks
// that a long record (the sliding log's, kilobytes) is compared by its
// digest: a decision sends the new record once, not twice.
func TestBytesOnTheWire(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, []string{srv.Addr}, redis.Options{})
	e := newEngine(t, s, engine.Options{})
	const n = 100
	for _, name := range algo.Names {
		l := engine.Limit{Namespace: string(name), Algorithm: algo.MustNew(name, algo.Params{Limit: 1000, Window: time.Hour})}
		for range 500 {
			if _, err := e.Apply(context.Background(), l, "user:1", 1); err != nil {
				t.Fatal(err)
			}
		}
		in0, out0 := netBytes(t, srv)
		for range n {
			if d, err := e.Apply(context.Background(), l, "user:1", 1); err != nil || !d.Allowed {
				t.Fatal(d, err)
			}
		}
		in1, out1 := netBytes(t, srv)
		// INFO's own request is counted too: about 30 bytes.
		in, out := (in1-in0-30)/n, (out1-out0)/n
		rec, err := s.Get(engine.AppendKey(nil, string(name), "user:1"), 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-16s record %5d B: sent %5d B, received %3d B per decision", name, len(rec), in, out)
		if in > int64(len(rec))+200 {
			t.Errorf("%s: a decision sent %d bytes for a %d-byte record: the expected record went whole", name, in, len(rec))
		}
	}
}
