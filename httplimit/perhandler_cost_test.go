package httplimit_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/httplimit"
)

// A cost the client chooses and gets wrong (0, negative, above the
// capacity) goes to OnError, and nothing is logged for it: a client
// sending a thousand such requests would otherwise write a thousand
// ERROR lines. The default OnError still logs the 500 it answers, once.
func TestPerHandlerBadCostsDoNotFloodTheLog(t *testing.T) {
	cost := func(r *http.Request) (int64, error) {
		return strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
	}
	bad := []string{"/?n=0", "/?n=-5", "/?n=3", "/?n=9223372036854775807"}

	t.Run("OnError", func(t *testing.T) {
		var logs bytes.Buffer
		var errs []error
		cfg := httplimit.PerHandlerConfig{
			Key:    byUser,
			Cost:   cost,
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			OnError: func(w http.ResponseWriter, r *http.Request, err error) {
				errs = append(errs, err)
				http.Error(w, "bad cost", http.StatusBadRequest)
			},
		}
		srv, _ := perHandlerServer(t, cfg, decisionHandler)
		for _, p := range bad {
			if got := get(t, srv, p, "X-User", "a"); got.status != http.StatusBadRequest {
				t.Errorf("GET %s: %d %q, want 400", p, got.status, got.body)
			}
		}
		if logs.Len() != 0 {
			t.Errorf("logged for costs the client chose:\n%s", logs.String())
		}
		if len(errs) != len(bad) {
			t.Fatalf("OnError called %d times, want %d", len(errs), len(bad))
		}
		for i, err := range errs {
			if !errors.Is(err, algo.ErrInvalidCost) && !errors.Is(err, algo.ErrCostExceedsCapacity) {
				t.Errorf("GET %s: OnError got %v, want a cost out of range", bad[i], err)
			}
		}
		// The budget is whole: nothing was spent by the refused costs.
		if got := get(t, srv, "/?n=2", "X-User", "a"); got.status != http.StatusOK {
			t.Errorf("GET /?n=2 after the refused costs: %d %q, want 200", got.status, got.body)
		}
	})

	t.Run("default", func(t *testing.T) {
		var logs bytes.Buffer
		cfg := httplimit.PerHandlerConfig{Key: byUser, Cost: cost, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		srv, _ := perHandlerServer(t, cfg, decisionHandler)
		if got := get(t, srv, "/?n=0", "X-User", "a"); got.status != http.StatusInternalServerError {
			t.Errorf("GET /?n=0: %d %q, want 500", got.status, got.body)
		}
		if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
			t.Errorf("%d ERROR lines for one 500, want 1:\n%s", n, logs.String())
		}
	})
}
