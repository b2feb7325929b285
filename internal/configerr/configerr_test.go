package configerr

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/clip"
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

// A reason or a field path that quotes a huge value is cut in the message,
// the cut marked with the whole length; Quote shows at most clip.Max bytes
// of a value.
func TestErrorIsBounded(t *testing.T) {
	huge := strings.Repeat("a", 10<<20)
	e := &Error{File: "f.yaml", Line: 2, Field: "rules[0]." + huge, Reason: "want a duration, got " + strconv.Quote(huge)}
	msg := e.Error()
	if len(msg) > 900 {
		t.Fatalf("the message of a 10 MiB field and reason is %d bytes, want at most 900", len(msg))
	}
	for _, want := range []string{"f.yaml:2: rules[0].aaa", "… (10485769 bytes): want a duration, got \"aaa", "… (10485783 bytes)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %.300s", want, msg)
		}
	}
	if q := Quote(huge); len(q) > clip.Max+clip.Overhead || !strings.HasSuffix(q, "\"… (10485760 bytes)") {
		t.Errorf("Quote of 10 MiB: %d bytes, ending %q", len(q), q[max(0, len(q)-30):])
	}
	if got, want := Quote("5x"), `"5x"`; got != want {
		t.Errorf("Quote(5x) = %s, want %s", got, want)
	}
}
