package grpclimit

import (
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
)

// A method name spelt otherwise than the service registers it reaches no
// handler: grpc-go dispatches on the exact name and answers Unimplemented,
// before any interceptor; so it neither passes a limit nor spends one.
// The names grpc-go dispatches are their own canonical form, matched as
// they are.
func TestRespeltMethodNamesReachNoHandler(t *testing.T) {
	s := newServer(t, []sluice.Rule{checkRule}, serverOpts{})
	for _, name := range []string{"//grpc.health.v1.Health/Check", "/grpc.health.v1.Health//Check", "/grpc.health.v1.Health/./Check",
		"/x/../grpc.health.v1.Health/Check", "/GRPC.health.v1.Health/Check"} {
		err := s.conn.Invoke(t.Context(), name, &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("%s: %v, want Unimplemented", name, err)
		}
	}
	for i := range 5 {
		if _, err := s.check(t, "x-user-id", "u"); err != nil {
			t.Fatalf("Check %d: %v, want allowed (the respelt calls spent nothing)", i+1, err)
		}
	}
	if _, err := s.check(t, "x-user-id", "u"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Check 6: %v, want ResourceExhausted", err)
	}
}
