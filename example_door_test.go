package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// A door of a program's own: jobs submitted by tenants, two a minute each.
// The program says who submits a job (Key) and turns each Outcome into its
// answer; the Door makes the decision every door makes. (The fake clock
// keeps the output fixed; a real program leaves Options.Clock nil.)
func ExampleNewDoor() {
	eng, err := engine.New(memory.New(nil), &engine.Options{Clock: engine.NewFakeClock(time.Unix(1_700_000_040, 0))})
	if err != nil {
		panic(err)
	}
	defer eng.Close()
	rs, err := sluice.NewRuleset([]sluice.Rule{{
		Name: "jobs", PathPrefix: "/jobs", Scope: sluice.ScopeUser,
		Algorithm: algo.TokenBucketName, Limit: 2, Window: time.Minute,
	}}, nil, "")
	if err != nil {
		panic(err)
	}
	type job struct{ tenant, queue string }
	door, err := sluice.NewDoor(sluice.DoorConfig[job]{
		Engine: eng,
		Key: func(j job, _ *sluice.CompiledRule) (string, int64, error) {
			return "user:" + j.tenant, 0, nil // 0: the rule's own cost
		},
	})
	if err != nil {
		panic(err)
	}
	for _, j := range []job{{"acme", "/jobs/render"}, {"acme", "/jobs/render"}, {"acme", "/jobs/mail"}, {"acme", "/status"}} {
		out := door.Decide(context.Background(), rs, "", j.queue, j)
		switch out.Verdict {
		case sluice.Allowed:
			fmt.Printf("%s: run (%d left)\n", j.queue, out.Decision.Remaining)
		case sluice.Denied:
			fmt.Printf("%s: retry in %ds (%s)\n", j.queue, sluice.RetryAfterSeconds(out.Decision), out.Rule.Policy())
		default:
			fmt.Printf("%s: %v\n", j.queue, out.Verdict)
		}
	}
	// Output:
	// /jobs/render: run (1 left)
	// /jobs/render: run (0 left)
	// /jobs/mail: retry in 30s ("jobs";q=2;w=60)
	// /status: unlimited
}
