package ratefield_test

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/ratefield"
)

// Each field of a decision, step by step: allowed, t is the reset capped
// at the policy's window; denied, t and Retry-After are the retry, never
// below 1; NoReset leaves out every time; a value not sent is empty.
func TestAppend(t *testing.T) {
	p := ratefield.NewPolicy("orders", 5, time.Minute)
	if got, want := p.Field, `"orders";q=5;w=60`; got != want {
		t.Fatalf("Field = %s, want %s", got, want)
	}
	for i, step := range []struct {
		d    algo.Decision
		edit func(*ratefield.Set)
		want [ratefield.NumValues]string
	}{
		{algo.Decision{Allowed: true, Limit: 5, Remaining: 3, Reset: 24 * time.Second}, nil,
			[...]string{"5", "3", "24", `"orders";r=3;t=24`, ""}},
		{algo.Decision{Allowed: true, Limit: 5, Remaining: 3, Reset: 90*time.Second + 1}, nil,
			[...]string{"5", "3", "91", `"orders";r=3;t=60`, ""}},
		{algo.Decision{Limit: 5, RetryAfter: 11*time.Second + 1, Reset: 60 * time.Second}, nil,
			[...]string{"5", "0", "60", `"orders";r=0;t=12`, "12"}},
		{algo.Decision{Limit: 5}, nil,
			[...]string{"5", "0", "0", `"orders";r=0;t=1`, "1"}},
		{algo.Decision{Limit: 5, RetryAfter: time.Second}, func(s *ratefield.Set) { s.NoReset = true },
			[...]string{"5", "0", "", `"orders";r=0`, ""}},
		{algo.Decision{Allowed: true, Limit: 5, Remaining: 3, Reset: time.Second}, func(s *ratefield.Set) { s.Reset = 1_800_000_000 },
			[...]string{"5", "3", "1800000000", `"orders";r=3;t=1`, ""}},
	} {
		s := p.Of(step.d)
		if step.edit != nil {
			step.edit(&s)
		}
		b, ends := p.Append([]byte("prefix:"), &s)
		got := ends.Cut(string(b))
		got[0] = got[0][len("prefix:"):]
		if got != step.want {
			t.Errorf("step %d: Append(%+v) = %q, want %q", i, step.d, got, step.want)
		}
		if rl := string(p.AppendRateLimit(nil, &s)); rl != step.want[ratefield.RateLimit] {
			t.Errorf("step %d: AppendRateLimit = %s, want %s", i, rl, step.want[ratefield.RateLimit])
		}
	}
}

// A name is a structured field string: '"' and '\' escaped, a control,
// DEL or a non-ASCII byte as '?' (the one replacement every door writes).
func TestAppendString(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"orders", `"orders"`},
		{"", `""`},
		{`a"b\c`, `"a\"b\\c"`},
		{"tab\there\x7f", `"tab?here?"`},
		{"café", `"caf??"`},
	} {
		if got := string(ratefield.AppendString([]byte("x"), tt.in)); got != "x"+tt.want {
			t.Errorf("AppendString(%q) = %s, want x%s", tt.in, got, tt.want)
		}
	}
}

// CeilSeconds is the least whole number of seconds not under d, and 0 for
// none.
func TestCeilSeconds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := time.Duration(rapid.Int64().Draw(t, "d"))
		s := ratefield.CeilSeconds(d)
		if d <= 0 {
			if s != 0 {
				t.Fatalf("CeilSeconds(%v) = %d, want 0", d, s)
			}
			return
		}
		if s < 1 || time.Duration(s-1)*time.Second >= d || (s < int64(time.Duration(1<<63-1)/time.Second) && time.Duration(s)*time.Second < d) {
			t.Fatalf("CeilSeconds(%v) = %d", d, s)
		}
	})
}
