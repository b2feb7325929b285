package metrics_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/throttled"
)

// series returns every series m exports over e, as name{labels}.
func series(t *testing.T, m *metrics.Metrics, e *engine.Engine) []string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector(e))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out = append(out, f.GetName()+"{"+strings.Join(labels, ",")+"}")
		}
	}
	return out
}

// The metrics are bounded in cardinality: after many callers, allowed,
// denied, near their limit and under a shadow rule, the series are the
// same as after one, and none names a caller (its user id, API key or
// address). The throttled list watches the same decisions, apart.
func TestNoCallerSeries(t *testing.T) {
	e, err := engine.New(memory.New(nil), &engine.Options{Clock: engine.NewFakeClock(time.Unix(1_700_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rs, err := sluice.NewRuleset([]sluice.Rule{
		{Name: "orders", PathPrefix: "/orders", Scope: sluice.ScopeUser, Algorithm: algo.TokenBucketName, Limit: 2, Window: time.Hour},
		{Name: "search", PathPrefix: "/search", Scope: sluice.ScopeAPIKey, Algorithm: algo.FixedWindowName, Limit: 2, Window: time.Hour},
		{Name: "trial", PathPrefix: "/", Scope: sluice.ScopeIP, Algorithm: algo.GCRAName, Limit: 1, Window: time.Hour, Shadow: true},
	}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(nil)
	m.InitRuleset(rs)
	tr, err := throttled.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(httplimit.Config{Engine: e, Registry: sluice.NewRegistry(rs), Metrics: m, Watch: tr})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	send := func(i int) {
		for _, path := range []string{"/orders", "/search", "/other"} {
			for range 3 { // the third is denied
				r := httptest.NewRequest("GET", path, nil)
				r.RemoteAddr = fmt.Sprintf("10.1.%d.%d:5000", i/250, i%250)
				r.Header.Set("X-User-ID", fmt.Sprintf("caller%04d", i))
				r.Header.Set("X-API-Key", fmt.Sprintf("secret%04d", i))
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
		}
	}
	send(0)
	one := series(t, m, e)
	for i := 1; i < 2000; i++ {
		send(i)
	}
	many := series(t, m, e)
	if len(many) != len(one) {
		t.Errorf("%d series after one caller, %d after 2000", len(one), len(many))
	}
	for _, s := range many {
		for _, who := range []string{"caller", "secret", "user:", "key:", "10.1."} {
			if strings.Contains(s, who) {
				t.Errorf("series %s names a caller (%q)", s, who)
			}
		}
	}
	if p, _ := tr.List("orders", 1, ""); p.Total != throttled.DefaultPerRule {
		t.Errorf("the throttled list holds %d callers of orders, want its bound %d", p.Total, throttled.DefaultPerRule)
	}
}
