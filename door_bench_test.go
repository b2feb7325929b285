package sluice_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// BenchmarkDoorDecide is the decision core of every door without a
// protocol: one rule allowing and denying, two rules in all mode, and an
// enforced rule with a shadow rule beside it, on the memory store.
func BenchmarkDoorDecide(b *testing.B) {
	const open, shut = 1_000_000_000, 1
	rule := func(name, prefix string, limit int64) sluice.Rule {
		return sluice.Rule{Name: name, PathPrefix: prefix, Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: limit, Window: time.Hour}
	}
	shadowed := func(r sluice.Rule) sluice.Rule { r.Shadow = true; return r }
	for _, bc := range []struct {
		name  string
		mode  sluice.MatchMode
		rules []sluice.Rule
		want  sluice.Verdict
	}{
		{"one/allowed", sluice.MatchMostSpecific, []sluice.Rule{rule("a", "/x", open)}, sluice.Allowed},
		{"one/denied", sluice.MatchMostSpecific, []sluice.Rule{rule("a", "/x", shut)}, sluice.Denied},
		{"all/allowed", sluice.MatchAll, []sluice.Rule{rule("a", "/x", open), rule("b", "/", open)}, sluice.Allowed},
		{"all/denied", sluice.MatchAll, []sluice.Rule{rule("a", "/x", open), rule("b", "/", shut)}, sluice.Denied},
		{"shadow/denied", sluice.MatchMostSpecific, []sluice.Rule{rule("a", "/x", open), shadowed(rule("b", "/x", shut))}, sluice.Allowed},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e, err := engine.New(memory.New(nil), &engine.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			rs, err := sluice.NewRuleset(bc.rules, nil, bc.mode)
			if err != nil {
				b.Fatal(err)
			}
			d, err := sluice.NewDoor(sluice.DoorConfig[call]{Engine: e, Key: callKey, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			ctx, req := context.Background(), call{user: "bench"}
			d.Decide(ctx, rs, "GET", "/x", req)
			b.ReportAllocs()
			for b.Loop() {
				if out := d.Decide(ctx, rs, "GET", "/x", req); out.Verdict != bc.want {
					b.Fatalf("verdict %v, want %v", out.Verdict, bc.want)
				}
			}
		})
	}
}

// BenchmarkDoorSlots is a request under a concurrency rule through the
// decision core, its slot taken and given back (Door.Release), alone and
// beside a rate rule (match: all), and refused at the limit, on the memory
// store: what holding a slot costs beside BenchmarkDoorDecide's decision.
func BenchmarkDoorSlots(b *testing.B) {
	slots := sluice.Rule{Name: "s", PathPrefix: "/x", Scope: sluice.ScopeUser, Algorithm: "concurrency", Limit: 4, MaxHold: time.Minute}
	rate := sluice.Rule{Name: "r", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: "token_bucket", Limit: 1_000_000_000, Window: time.Hour}
	full := slots
	full.Limit = 1
	for _, bc := range []struct {
		name  string
		mode  sluice.MatchMode
		rules []sluice.Rule
		hold  bool // a request holds the only slot throughout
		want  sluice.Verdict
	}{
		{"one/allowed+release", sluice.MatchMostSpecific, []sluice.Rule{slots}, false, sluice.Allowed},
		{"all/allowed+release", sluice.MatchAll, []sluice.Rule{slots, rate}, false, sluice.Allowed},
		{"one/denied", sluice.MatchMostSpecific, []sluice.Rule{full}, true, sluice.Denied},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e, err := engine.New(memory.New(nil), &engine.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			rs, err := sluice.NewRuleset(bc.rules, nil, bc.mode)
			if err != nil {
				b.Fatal(err)
			}
			d, err := sluice.NewDoor(sluice.DoorConfig[call]{Engine: e, Key: callKey, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			ctx, req := context.Background(), call{user: "bench"}
			if bc.hold {
				d.Decide(ctx, rs, "GET", "/x", req) // holds the slot
			}
			b.ReportAllocs()
			for b.Loop() {
				out := d.Decide(ctx, rs, "GET", "/x", req)
				if out.Verdict != bc.want {
					b.Fatalf("verdict %v, want %v", out.Verdict, bc.want)
				}
				d.Release(ctx, out.Held)
			}
		})
	}
}
