package httplimit

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/logpace"
)

// A Cost function that passes on what the client asked for fails every
// request asking for more than the capacity: each is a 500, and the log
// has at most a line a second of them, not one each.
func TestCostAboveCapacityLogIsPaced(t *testing.T) {
	f := newFixture(t, []sluice.Rule{ordersRule}, fixtureOpts{config: func(c *Config) {
		c.Cost = func(*http.Request, *sluice.CompiledRule) int64 { return 100 }
	}})
	const n = 200
	start := time.Now()
	for i := range n {
		if w := f.do("POST", "/api/orders", "192.0.2.1:1"); w.Code != 500 {
			t.Fatalf("request %d: %d, want 500", i, w.Code)
		}
	}
	elapsed := time.Since(start)
	lines := strings.Count(f.logs.String(), "cannot decide")
	// The first is logged, then at most one an Interval, however slow the
	// machine made the loop.
	if most := 1 + int(elapsed/logpace.Interval); lines < 1 || lines > most {
		t.Fatalf("%d requests in %v logged %d lines, want 1 to %d:\n%s", n, elapsed, lines, most, f.logs.String())
	}
	if f.calls.Load() != 0 {
		t.Errorf("the handler was called %d times", f.calls.Load())
	}
}
