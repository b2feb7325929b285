package sluice_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

// benchRules returns n prefix rules over distinct resources, and a catch-all.
func benchRules(n int, extra ...sluice.Rule) []sluice.Rule {
	rules := []sluice.Rule{{Name: "all", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: algo.GCRAName, Limit: 100, Window: time.Minute}}
	for i := range n {
		rules = append(rules, sluice.Rule{Name: fmt.Sprintf("r%d", i), PathPrefix: fmt.Sprintf("/v1/res%d/items", i),
			Scope: sluice.ScopeUser, Algorithm: algo.GCRAName, Limit: 100, Window: time.Minute})
	}
	return append(rules, extra...)
}

// BenchmarkAppendMatch matches a request against a ruleset of prefixes:
// the cost every request pays before any key is made.
func BenchmarkAppendMatch(b *testing.B) {
	for _, mode := range []sluice.MatchMode{sluice.MatchMostSpecific, sluice.MatchAll} {
		rs, err := sluice.NewRuleset(benchRules(20), nil, mode)
		if err != nil {
			b.Fatal(err)
		}
		q := sluice.RequestShape{Method: "GET", Path: "/v1/res17/items/42"}
		b.Run(string(mode), func(b *testing.B) {
			benchMatch(b, rs, q)
		})
	}
	// The same resources as path patterns with a parameter each.
	var pats []sluice.Rule
	for i := range 20 {
		pats = append(pats, sluice.Rule{Name: fmt.Sprintf("p%d", i), Path: fmt.Sprintf("/v1/res%d/{id}", i),
			Scope: sluice.ScopeParam("id"), Algorithm: algo.GCRAName, Limit: 100, Window: time.Minute})
	}
	rs, err := sluice.NewRuleset(benchRules(0, pats...), nil, sluice.MatchMostSpecific)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("patterns", func(b *testing.B) {
		benchMatch(b, rs, sluice.RequestShape{Method: "GET", Path: "/v1/res17/42"})
	})
}

// benchMatch measures rs.AppendMatch of q.
func benchMatch(b *testing.B, rs *sluice.Ruleset, q sluice.RequestShape) {
	var dst [8]*sluice.CompiledRule
	b.ReportAllocs()
	for b.Loop() {
		if len(rs.AppendMatch(dst[:0], q)) == 0 {
			b.Fatal("no match")
		}
	}
}
