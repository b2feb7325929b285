package algo_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
)

// stale is a decision no step answers: StepInto must overwrite every field.
var stale = algo.Decision{
	Allowed: true, Limit: -1, Remaining: -1, RetryAfter: -1, Reset: -1,
	Delay: -1, TTL: -1, CorruptState: true,
}

// TestStepIntoMatchesStep drives each algorithm through allowed, denied and
// corrupt-record steps with algo.StepInto, into a decision left over from
// an unrelated call, and checks every record and decision against Step's.
func TestStepIntoMatchesStep(t *testing.T) {
	p := algo.Params{Limit: 3, Window: time.Second}
	for _, name := range algo.Names {
		t.Run(string(name), func(t *testing.T) {
			a, b := algo.MustNew(name, p), algo.MustNew(name, p)
			if got, want := algo.Capacity(a), a.Params().Capacity(); got != want {
				t.Fatalf("Capacity = %d, want %d", got, want)
			}
			var sa, sb []byte
			now := int64(1_700_000_000e9)
			for i := range 12 {
				if i == 9 {
					sa, sb = []byte{0xff, 1, 2}, []byte{0xff, 1, 2} // corrupt
				}
				cost := int64(1 + i%2)
				want, wd := b.Step(append([]byte(nil), sb...), now, cost)
				d := stale
				got := algo.StepInto(a, append([]byte(nil), sa...), now, cost, &d)
				if d != wd || !bytes.Equal(got, want) {
					t.Fatalf("step %d: StepInto = %x, %+v; Step = %x, %+v", i, got, d, want, wd)
				}
				if want != nil {
					sa, sb = got, want
				}
				now += int64(150 * time.Millisecond)
			}
		})
	}
}

// custom is an Algorithm of another package's making.
type custom struct{ calls int }

func (*custom) Name() algo.Name     { return "custom" }
func (*custom) Params() algo.Params { return algo.Params{Limit: 7, Window: time.Second, Burst: 9} }
func (c *custom) Step(state []byte, now, cost int64) ([]byte, algo.Decision) {
	c.calls++
	return []byte{1}, algo.Decision{Allowed: true, Limit: 9, Remaining: 8 - cost, TTL: time.Second}
}

func TestStepIntoOtherAlgorithm(t *testing.T) {
	c := &custom{}
	if got := algo.Capacity(c); got != 9 {
		t.Fatalf("Capacity = %d, want the burst 9", got)
	}
	d := stale
	next := algo.StepInto(c, nil, 0, 2, &d)
	want := algo.Decision{Allowed: true, Limit: 9, Remaining: 6, TTL: time.Second}
	if c.calls != 1 || d != want || !bytes.Equal(next, []byte{1}) {
		t.Fatalf("StepInto = %x, %+v after %d calls; want 01, %+v after 1", next, d, c.calls, want)
	}
}
