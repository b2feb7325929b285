package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
)

// TestDocsSaaSPlanExample loads the configuration of docs/serve.md's
// worked example (a SaaS plan) and holds what the section says of it: an
// ordinary caller is decided under the organisation's month and minute,
// the user's minute and the user's slots; a premium one under the premium
// month in place of the month, keeping the organisation's minute pool.
func TestDocsSaaSPlanExample(t *testing.T) {
	const heading = "## A worked example: a SaaS plan"
	var body string
	for _, f := range docsFiles(t) {
		if f.path != "docs/serve.md" {
			continue
		}
		at := slices.Index(f.lines, heading)
		if at < 0 {
			t.Fatalf("docs/serve.md has no section %q", heading)
		}
		for _, b := range f.blocks {
			if b.line > at && b.lang == "yaml" {
				body = b.body
				break
			}
		}
	}
	if body == "" {
		t.Fatalf("docs/serve.md: no yaml block under %q", heading)
	}
	cfg, err := config.Parse("docs/serve.md saas plan", []byte(body))
	if err != nil {
		t.Fatalf("the worked example's configuration is refused: %v", err)
	}
	rs, err := cfg.Ruleset()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ plan, want string }{
		{"", "in-flight org-minute org-month user-minute"},
		{"premium", "in-flight org-minute org-month-premium user-minute"},
	} {
		var got []string
		for _, c := range rs.AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: "/v1/reports", Plan: tt.plan}) {
			got = append(got, c.Name())
		}
		slices.Sort(got)
		if strings.Join(got, " ") != tt.want {
			t.Errorf("plan %q: GET /v1/reports is decided under %v, want %s", tt.plan, got, tt.want)
		}
	}
}
