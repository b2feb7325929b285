package engine

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
)

// foreign is an algorithm of another package's making: one of package
// algo's behind a type of its own.
type foreign struct{ algo.Algorithm }

// TestOneDispatch: decideMemory's dispatch covers every algorithm of
// package algo (algo.Names), allowed and denied, by Apply and by
// ApplyKeyInto: none of them reaches stepOther, which an algorithm of
// another package does. An algorithm added to package algo and not to the
// dispatch fails here, rather than silently taking the slower path.
func TestOneDispatch(t *testing.T) {
	others := 0
	saved := stepOther
	stepOther = func(a algo.Algorithm, state []byte, now, cost int64) ([]byte, algo.Decision) {
		others++
		return saved(a, state, now, cost)
	}
	t.Cleanup(func() { stepOther = saved })
	e, err := New(memory.New(&memory.Options{SweepInterval: -1}), &Options{Clock: NewFakeClock(time.Unix(1_700_000_000, 0))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.store.table == nil {
		t.Fatal("over a bare memory store the engine does not decide on its table")
	}
	p := algo.Params{Limit: 2, Window: time.Minute}
	for _, name := range algo.Names {
		l := Limit{Namespace: string(name), Algorithm: algo.MustNew(name, p)}
		k := l.Key("prepared")
		for i := range 3 { // allowed, allowed, denied
			var d algo.Decision
			if _, err := e.Apply(context.Background(), l, "k", 1); err != nil {
				t.Fatal(err)
			}
			if err := e.ApplyKeyInto(context.Background(), l, &k, 1, &d); err != nil || d.Allowed != (i < 2) {
				t.Fatalf("%s, request %d: ApplyKeyInto = %+v, %v", name, i, d, err)
			}
		}
	}
	if others != 0 {
		t.Fatalf("%d decisions of package algo's algorithms took the dispatch for other packages' (stepOther): decideMemory's switch lacks a case of algo.Names", others)
	}
	l := Limit{Namespace: "foreign", Algorithm: foreign{algo.MustNew(algo.GCRAName, p)}}
	if d, err := e.Apply(context.Background(), l, "k", 1); err != nil || !d.Allowed || others != 1 {
		t.Fatalf("an algorithm of another package: %+v, %v, %d steps through stepOther; want allowed, 1", d, err, others)
	}
}
