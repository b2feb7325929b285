package grpclimit

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/throttled"
)

// The interceptors tell Config.Watch of the calls denied or near the
// limit: a throttled.Tracker lists the caller denied, by its key.
func TestWatchSeesDenials(t *testing.T) {
	tr, err := throttled.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, []sluice.Rule{checkRule}, serverOpts{config: func(c *Config) { c.Watch = tr }})
	for range 5 {
		if _, err := s.check(t, "x-user-id", "ann"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.check(t, "x-user-id", "ann"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("sixth call: %v, want ResourceExhausted", err)
	}
	p, err := tr.List("check", 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Callers) != 1 || p.Callers[0].Key != "user:ann" || p.Callers[0].Denied != 1 || p.Callers[0].Near != 1 {
		t.Errorf("listed %+v, want user:ann denied once after one call near the limit", p.Callers)
	}
}
