package main

import (
	"errors"
	"strings"
	"testing"
)

const callgrindOut = `# callgrind format
version: 1
creator: callgrind-3.19.0
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
fl=(1) engine.go
fn=(1) Apply
16 5 2 1
summary: 1000 300 200 4 30 20 2 10 5
totals: 1000 300 200 4 30 20 2 10 5
`

func TestParseTotals(t *testing.T) {
	m, err := ParseTotals(strings.NewReader(callgrindOut))
	if err != nil {
		t.Fatal(err)
	}
	for e, want := range map[string]float64{"Ir": 1000, "D1mr": 30, "D1mw": 20, "DLmr": 10, "DLmw": 5} {
		if got := m[e]; got != want {
			t.Errorf("%s = %v, want %v", e, got, want)
		}
	}
	for _, bad := range []string{"events: Ir\n", "totals: 5\n", "events: Ir\ntotals: x\n", "events: Ir\ntotals: 1 2\n"} {
		if _, err := ParseTotals(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseTotals(%q) = nil error", bad)
		}
	}
}

func TestWrite(t *testing.T) {
	var b strings.Builder
	Write(&b, []Row{{Name: "a"}, {Name: "b"}}, []Cost{{Instructions: 543.4, L1Misses: 4.615, L2Misses: 2.3}, {Instructions: 307, L1Misses: -0.001}})
	for _, want := range []string{"| a | 543 | 4.62 | 2.30 |", "| b | 307 | 0.00 | 0.00 |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestRows: every row names a binary the command builds and one
// benchmark, anchored, and a function to count in.
func TestRows(t *testing.T) {
	for _, r := range Rows {
		if r.Binary != "engine" && r.Binary != "bench" {
			t.Errorf("%s: binary %q", r.Name, r.Binary)
		}
		if !strings.HasPrefix(r.Bench, "^Benchmark") || !strings.HasSuffix(r.Bench, "$") || r.Func == "" {
			t.Errorf("%s: bench %q, func %q", r.Name, r.Bench, r.Func)
		}
	}
}

// TestPerDecision checks the difference per decision, and that a longer run
// that counted no more than the shorter one is an error to measure again,
// not a negative cost in the table.
func TestPerDecision(t *testing.T) {
	c, err := PerDecision(map[string]float64{"Ir": 1000, "D1mr": 10}, map[string]float64{"Ir": 5000, "D1mr": 30}, 10)
	if err != nil || c.Instructions != 200 || c.L1Misses != 1 {
		t.Errorf("PerDecision = %+v, %v; want 200 instructions and 1 miss", c, err)
	}
	if _, err := PerDecision(map[string]float64{"Ir": 68e6}, map[string]float64{"Ir": 15e6}, 100_000); !errors.Is(err, errNotPerDecision) {
		t.Errorf("PerDecision of a shorter count that exceeds the longer: %v, want errNotPerDecision", err)
	}
}
