package bench

import "testing"

// TestWorkloadRates checks, in a few calls each, that every implementation
// answers as its workload assumes: Unlimited and Refilling allow, Exhausted
// allows the first call and denies the next.
func TestWorkloadRates(t *testing.T) {
	for _, tc := range []struct {
		rate Rate
		want []bool
	}{
		{Unlimited, []bool{true, true, true}},
		{Refilling, []bool{true, true, true}},
		{Exhausted, []bool{true, false, false}},
	} {
		for _, im := range impls(workload{rate: tc.rate, fakeClock: true}) {
			l, err := im.new()
			if err != nil {
				t.Fatalf("%s at %+v: %v", im.name, tc.rate, err)
			}
			for i, want := range tc.want {
				got, err := l.Allow("user-000000000000042")
				if err != nil || got != want {
					t.Errorf("%s at %+v: call %d: Allow = %v, %v; want %v, nil", im.name, tc.rate, i, got, err, want)
				}
			}
			l.Close()
		}
	}
}
