package configerr

import (
	"errors"
	"testing"

	"github.com/sluice-go/sluice"
)

// An error leaves out what it does not know, matches
// sluice.ErrInvalidConfig and unwraps to its cause.
func TestError(t *testing.T) {
	cause := errors.New("cause")
	for _, c := range []struct {
		e    Error
		want string
	}{
		{Error{File: "f.yaml", Line: 3, Field: "rules[0].window", Reason: "bad"}, "f.yaml:3: rules[0].window: bad"},
		{Error{File: "f.yaml", Field: "domain", Reason: "required"}, "f.yaml: domain: required"},
		{Error{File: "f.yaml", Line: 2, Reason: "did not find expected key"}, "f.yaml:2: did not find expected key"},
		{Error{File: "f.yaml", Reason: "the configuration is empty", Err: cause}, "f.yaml: the configuration is empty"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.e, got, c.want)
		}
		var err error = &c.e
		if !errors.Is(err, sluice.ErrInvalidConfig) {
			t.Errorf("%q does not match sluice.ErrInvalidConfig", err)
		}
		if got := errors.Unwrap(err); got != c.e.Err {
			t.Errorf("%q unwraps to %v, want %v", err, got, c.e.Err)
		}
	}
	if got, want := Join(Index("rules", 1), "window"), "rules[1].window"; got != want {
		t.Errorf("Join(Index(rules, 1), window) = %q, want %q", got, want)
	}
	if got := Join("", "store"); got != "store" {
		t.Errorf("Join at the top = %q, want store", got)
	}
}
