package walk

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
)

// chunks serves keys 0 … n-1 in chunks of size, as a store's rangeChunk.
func chunks(n, size int, calls *[]string) func(from []byte) ([]backend.Record, []byte, error) {
	return func(from []byte) ([]backend.Record, []byte, error) {
		*calls = append(*calls, string(from))
		var start int
		fmt.Sscan(string(from), &start)
		var recs []backend.Record
		i := start
		for ; i < n && i < start+size; i++ {
			recs = append(recs, backend.Record{Key: fmt.Appendf(nil, "%d", i)})
		}
		if i == n {
			return recs, nil, nil
		}
		return recs, fmt.Appendf(nil, "%d", i), nil
	}
}

func TestRange(t *testing.T) {
	tests := []struct {
		n, size, stopAt int
		want            string
		calls           string
	}{
		{7, 3, -1, "[0 1 2 3 4 5 6]", "[0 3 6]"},
		{6, 3, -1, "[0 1 2 3 4 5]", "[0 3]"},
		{0, 3, -1, "[]", "[0]"},
		{7, 3, 4, "[0 1 2 3 4]", "[0 3]"},
	}
	for _, tt := range tests {
		var got, calls []string
		err := Range([]byte("0"), chunks(tt.n, tt.size, &calls), func(r backend.Record) bool {
			got = append(got, string(r.Key))
			return len(got) != tt.stopAt+1
		})
		if err != nil || fmt.Sprint(got) != tt.want || fmt.Sprint(calls) != tt.calls {
			t.Errorf("Range(n=%d, size=%d, stop at %d) = %v listing %v in chunks from %v, want nil, %s, %s", tt.n, tt.size, tt.stopAt, err, got, calls, tt.want, tt.calls)
		}
	}
	boom := errors.New("boom")
	err := Range(nil, func([]byte) ([]backend.Record, []byte, error) { return nil, nil, boom }, func(backend.Record) bool {
		t.Error("fn called after a failed chunk")
		return true
	})
	if err != boom {
		t.Errorf("Range with a failing chunk = %v, want %v", err, boom)
	}
}

func TestEvery(t *testing.T) {
	stop := make(chan struct{})
	ticks := make(chan struct{})
	done := make(chan struct{})
	go func() {
		Every(stop, time.Millisecond, func() { ticks <- struct{}{} })
		close(done)
	}()
	for range 3 {
		select {
		case <-ticks:
		case <-time.After(10 * time.Second):
			t.Fatal("no tick after 10s")
		}
	}
	close(stop)
	for {
		select {
		case <-ticks: // a tick already under way
		case <-done:
			return
		case <-time.After(10 * time.Second):
			t.Fatal("Every still running 10s after stop closed")
		}
	}
}

func TestSweep(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		results []error // one per chunk; nil then wrapped after the last
		want    int
	}{
		{"wraps", []error{nil, nil, nil}, 3},
		{"fails", []error{nil, boom, nil}, 2},
	}
	for _, tt := range tests {
		calls := 0
		Sweep(make(chan struct{}), func() (bool, error) {
			calls++
			return calls == len(tt.results), tt.results[calls-1]
		})
		if calls != tt.want {
			t.Errorf("%s: %d chunks, want %d", tt.name, calls, tt.want)
		}
	}
	stop := make(chan struct{})
	calls := 0
	Sweep(stop, func() (bool, error) {
		calls++
		if calls == 2 {
			close(stop)
		}
		return false, nil
	})
	if calls != 2 {
		t.Errorf("stopped: %d chunks, want 2", calls)
	}
}
