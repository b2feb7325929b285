package replay_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/replay"
)

// replayLog replays a combined log under the rules file cfg and returns
// the report.
func replayLog(t *testing.T, cfg string, lines []string) *replay.Report {
	t.Helper()
	c, err := config.Parse("rules.yaml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	r, err := replay.New("rules.yaml", c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	src, err := replay.NewSource("access.log", strings.NewReader(strings.Join(lines, "\n")+"\n"), replay.SourceOptions{Format: "combined"}, 5)
	if err != nil {
		t.Fatal(err)
	}
	res := replay.Run([]*replay.Source{src}, r, nil, replay.RunOptions{})
	if len(res.BadLines) > 0 {
		t.Fatalf("bad lines: %+v", res.BadLines)
	}
	return res.Report
}

// combinedLine is one access log line of a request from peer at second s.
func combinedLine(s int, peer, method, target string) string {
	return fmt.Sprintf(`%s - - [30/Nov/2026:10:00:%02d +0000] "%s %s HTTP/1.1" 200 5 "-" "ua"`, peer, s, method, target)
}

// A replay matches every spelling of a path as serve does: the canonical
// path's rule counts it; HEAD counts on the GET rule; and path_case:
// insensitive counts a path in any case.
func TestReplayMatchesPathSpellings(t *testing.T) {
	const rules = `rules:
  - {name: orders, method: POST, path_prefix: /api/orders, scope: ip, algorithm: fixed_window, limit: 5, window: 1m}
  - {name: search, method: GET, path_prefix: /api/search, scope: ip, algorithm: fixed_window, limit: 2, window: 1m}
`
	var lines []string
	for i, p := range []string{"/api/orders", "//api/orders", "/api//orders", "/api/./orders", "/api/x/../orders",
		"/api/%2e%2e/api/orders", "/api%2Forders?x=1", "/API/Orders"} {
		lines = append(lines, combinedLine(i, "192.0.2.1", "POST", p))
	}
	lines = append(lines, combinedLine(10, "192.0.2.1", "HEAD", "/api/search"), combinedLine(11, "192.0.2.1", "GET", "/api/search"),
		combinedLine(12, "192.0.2.1", "HEAD", "/api/search"))
	for _, tt := range []struct {
		cfg                  string
		orders, ordersDenied int64
		search, searchDenied int64
		unlimited            int64
	}{
		{rules, 7, 2, 3, 1, 1},                              // /API/Orders is no rule's
		{"path_case: insensitive\n" + rules, 8, 3, 3, 1, 0}, // it is the orders rule's
	} {
		rep := replayLog(t, tt.cfg, lines)
		got := map[string][2]int64{}
		for _, r := range rep.Rules {
			got[r.Name] = [2]int64{r.Requests, r.Denied}
		}
		if got["orders"] != [2]int64{tt.orders, tt.ordersDenied} || got["search"] != [2]int64{tt.search, tt.searchDenied} || rep.Unlimited != tt.unlimited {
			t.Errorf("%q: orders, search (requests, denied) = %v, %v, unlimited %d; want %v, %v, %d", strings.SplitN(tt.cfg, "\n", 2)[0],
				got["orders"], got["search"], rep.Unlimited, [2]int64{tt.orders, tt.ordersDenied}, [2]int64{tt.search, tt.searchDenied}, tt.unlimited)
		}
	}
}
