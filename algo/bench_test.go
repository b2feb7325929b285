package algo

import (
	"testing"
	"time"
)

// benchStart is the benchmarks' clock: a realistic Unix time.
const benchStart = 1_700_000_000e9

// benchAllowed returns parameters and a clock step under which every request
// of cost 1 is admitted indefinitely: a token a nanosecond for the counting
// algorithms, and for the sliding log a steady 8 live entries.
func benchAllowed(name Name) (Params, int64) {
	if name == SlidingLogName {
		return Params{Limit: 16, Window: time.Millisecond}, int64(125 * time.Microsecond)
	}
	return Params{Limit: 1_000_000_000, Window: time.Second}, 1
}

// BenchmarkStep is the admitted path: the record is read, changed and
// written back in its own backing array, as a store holding it would.
func BenchmarkStep(b *testing.B) {
	for _, name := range Names {
		b.Run(string(name), func(b *testing.B) {
			p, dt := benchAllowed(name)
			a := MustNew(name, p)
			now := int64(benchStart)
			state, _ := a.Step(nil, now, 1)
			state = append(make([]byte, 0, 64), state...)
			b.ReportAllocs()
			for b.Loop() {
				now += dt
				next, d := a.Step(state, now, 1)
				if !d.Allowed {
					b.Fatalf("denied at %d: %+v", now, d)
				}
				state = next
			}
		})
	}
}

// BenchmarkStepDenied is the denied path: an exhausted key asked again at
// the same instant; nothing is written.
func BenchmarkStepDenied(b *testing.B) {
	for _, name := range Names {
		b.Run(string(name), func(b *testing.B) {
			a := MustNew(name, Params{Limit: 5, Window: time.Second})
			state, _ := a.Step(nil, benchStart, 5)
			b.ReportAllocs()
			for b.Loop() {
				if _, d := a.Step(state, benchStart, 1); d.Allowed {
					b.Fatal("admitted")
				}
			}
		})
	}
}

// BenchmarkStepLimit10 compares the sliding log with the token bucket at a
// limit of 10 per second, a request every 100 ms and a nanosecond: the log
// holds ten live entries, drops one and adds one at every step.
func BenchmarkStepLimit10(b *testing.B) {
	for _, name := range []Name{TokenBucketName, SlidingLogName} {
		b.Run(string(name), func(b *testing.B) {
			a := MustNew(name, Params{Limit: 10, Window: time.Second})
			dt := int64(100*time.Millisecond) + 1
			now := int64(benchStart)
			state := make([]byte, 0, 128)
			for range 20 {
				now += dt
				next, _ := a.Step(state, now, 1)
				state = next
			}
			b.ReportAllocs()
			for b.Loop() {
				now += dt
				next, d := a.Step(state, now, 1)
				if !d.Allowed {
					b.Fatalf("denied at %d: %+v", now, d)
				}
				state = next
			}
		})
	}
}

// BenchmarkStepLimit10Denied is BenchmarkStepLimit10's denied path: ten
// requests a millisecond apart fill a limit of 10 per second, and the key
// is asked again at the instant of the last; nothing is written.
func BenchmarkStepLimit10Denied(b *testing.B) {
	for _, name := range []Name{TokenBucketName, SlidingLogName} {
		b.Run(string(name), func(b *testing.B) {
			a := MustNew(name, Params{Limit: 10, Window: time.Second})
			now := int64(benchStart)
			state := make([]byte, 0, 128)
			for range 10 {
				now += int64(time.Millisecond)
				next, d := a.Step(state, now, 1)
				if !d.Allowed {
					b.Fatalf("denied at %d: %+v", now, d)
				}
				state = next
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, d := a.Step(state, now, 1); d.Allowed {
					b.Fatal("admitted")
				}
			}
		})
	}
}

// BenchmarkStepCalendar is BenchmarkStep for the window algorithms over a
// calendar month in Berlin: the window is found in the calendar's memo.
func BenchmarkStepCalendar(b *testing.B) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		b.Skip(err)
	}
	for _, name := range []Name{FixedWindowName, SlidingCounterName} {
		b.Run(string(name), func(b *testing.B) {
			a := MustNew(name, Params{Limit: 1_000_000_000, Calendar: Calendar{Unit: CalendarMonth, Location: berlin}})
			now := int64(benchStart)
			state, _ := a.Step(nil, now, 1)
			state = append(make([]byte, 0, 64), state...)
			b.ReportAllocs()
			for b.Loop() {
				now++
				next, d := a.Step(state, now, 1)
				if !d.Allowed {
					b.Fatalf("denied at %d: %+v", now, d)
				}
				state = next
			}
		})
	}
}
