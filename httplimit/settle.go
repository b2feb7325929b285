package httplimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"

	"github.com/sluice-go/sluice"
)

// Costs settled after the response (sluice.Rule.Settle). The estimate of a
// request is read from its JSON body (Settle.EstimateField), which the
// middleware reads whole, up to Settle.MaxBody, and hands on unchanged to
// the handler; the actual cost from the response: a header, a trailer, or
// a field of its JSON body or of one of its text/event-stream events,
// which the middleware watches as they pass, unbuffered (a Flush reaches
// the client at once). Once the handler has returned, the request is
// settled:
//
//   - with the actual cost found (the last event holding it, for a
//     stream);
//   - with zero when none was found and the response's status is 400 or
//     more (the upstream refused or failed the request: it did no work to
//     count);
//   - not at all when none was found in a successful response (a stream
//     whose client did not ask for its usage, a body over MaxBody), or
//     when the client went away before the response ended: the estimate
//     stands.
//
// A value that is not a whole number, or is negative, counts as none; one
// above the largest int64 as the largest (the settle charges it up to the
// rule's debt bound).

// ErrBodyTooLarge is the error of a request whose body exceeds the
// Settle.MaxBody of a rule that reads its estimate from the body: the
// request is answered 413 Content Too Large.
var ErrBodyTooLarge = errors.New("sluice/httplimit: request body too large to read its cost")

// costBody is a request body the middleware has read for an estimate,
// handed on to the handler from its start.
type costBody struct {
	*bytes.Reader
	data []byte
	orig io.Closer
}

// Close closes the body the client sent.
func (b *costBody) Close() error { return b.orig.Close() }

// readCostBody returns r's body, read up to max bytes, and sets r.Body to
// hand it on whole; a body read already (by another rule) is reused.
func readCostBody(r *http.Request, max int64) ([]byte, error) {
	if b, ok := r.Body.(*costBody); ok {
		if int64(len(b.data)) > max {
			return nil, ErrBodyTooLarge
		}
		return b.data, nil
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > max {
		return nil, ErrBodyTooLarge
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("sluice/httplimit: reading the request body: %w", err)
	}
	if int64(len(data)) > max {
		return nil, ErrBodyTooLarge
	}
	r.Body = &costBody{Reader: bytes.NewReader(data), data: data, orig: r.Body}
	return data, nil
}

// estimate returns what r is estimated to cost under rule, whose Settle is
// s: EstimateField's value in r's JSON body plus EstimateAdd, or zero (the
// rule's Cost) when the body has none.
func estimate(r *http.Request, s *sluice.Settle) (int64, error) {
	if s.EstimateField == "" {
		return 0, nil
	}
	body, err := readCostBody(r, s.Limit())
	if err != nil {
		return 0, err
	}
	n, ok := jsonInt(body, sluice.FieldPath(s.EstimateField))
	if !ok {
		return 0, nil
	}
	if n > math.MaxInt64-s.EstimateAdd {
		return math.MaxInt64, nil
	}
	return n + s.EstimateAdd, nil
}

// jsonInt returns the whole number of zero or more at path in the JSON
// object data, and whether there is one (jsonpath.go). A number above the
// largest int64 is the largest.
func jsonInt(data []byte, path []string) (int64, bool) {
	raw, ok := jsonField(data, path)
	if !ok {
		return 0, false
	}
	return sluice.ParseCost(string(raw))
}

// settleWriter is the ResponseWriter of a request with reservations: it
// passes everything on as it comes and watches for the actual cost.
type settleWriter struct {
	http.ResponseWriter
	rules  []*sluice.CompiledRule // the reserved rules with Settle
	status int
	max    int64 // the most of the body kept (the rules' largest MaxBody)
	fields bool  // a rule reads a field of the body
	stream bool  // text/event-stream: events are read as they pass
	over   bool  // the body, or a line of the stream, went past max
	body   []byte
	found  []int64 // per rule, the actual cost found in the body, -1 for none
}

// newSettleWriter returns a settleWriter over w for the reserved rules of
// res.
func newSettleWriter(w http.ResponseWriter, res *sluice.Reserved) *settleWriter {
	s := &settleWriter{ResponseWriter: w}
	for _, c := range res.Rules {
		if st := c.Settle(); st != nil {
			s.rules = append(s.rules, c)
			s.found = append(s.found, -1)
			s.max = max(s.max, st.Limit())
			s.fields = s.fields || st.ActualField != ""
		}
	}
	return s
}

// WriteHeader notes the status and whether the body is a stream of events.
func (s *settleWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
		ct := s.Header().Get("Content-Type")
		s.stream = strings.HasPrefix(strings.TrimSpace(strings.ToLower(ct)), "text/event-stream")
	}
	s.ResponseWriter.WriteHeader(code)
}

// Write passes p on, and keeps it to read the actual cost from.
func (s *settleWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.WriteHeader(http.StatusOK)
	}
	n, err := s.ResponseWriter.Write(p)
	if s.fields && n > 0 {
		s.keep(p[:n])
	}
	return n, err
}

// keep reads p, the next bytes of the body: a stream line by line, a JSON
// body whole at the end.
func (s *settleWriter) keep(p []byte) {
	if !s.stream {
		if s.over || int64(len(s.body)+len(p)) > s.max {
			s.over, s.body = true, nil
			return
		}
		s.body = append(s.body, p...)
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if int64(len(s.body)+len(p)) > s.max {
				s.over, s.body = true, s.body[:0] // a line too long: skipped to its end
			} else if !s.over {
				s.body = append(s.body, p...)
			}
			return
		}
		if !s.over && int64(len(s.body)+i) <= s.max {
			s.body = append(s.body, p[:i]...)
			s.event(s.body)
		}
		s.over, s.body, p = false, s.body[:0], p[i+1:]
	}
}

// event reads one line of an event stream: a data line holding a JSON
// object with a rule's field sets its actual cost.
func (s *settleWriter) event(line []byte) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return // [DONE], or not an object
	}
	s.fieldsOf(data)
}

// fieldsOf reads each rule's field of the JSON object data.
func (s *settleWriter) fieldsOf(data []byte) {
	for i, c := range s.rules {
		if f := c.Settle().ActualField; f != "" {
			if n, ok := jsonInt(data, sluice.FieldPath(f)); ok {
				s.found[i] = n
			}
		}
	}
}

// Flush sends what has been written to the client.
func (s *settleWriter) Flush() { _ = http.NewResponseController(s.ResponseWriter).Flush() }

// Unwrap returns the ResponseWriter underneath, for
// http.ResponseController.
func (s *settleWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// actual returns the actual cost of the response under rule (see the
// comment at the top of this file).
func (s *settleWriter) actual(rule *sluice.CompiledRule) (int64, bool) {
	i := 0
	for i < len(s.rules) && s.rules[i].Name() != rule.Name() {
		i++
	}
	if i == len(s.rules) {
		return 0, false
	}
	st := rule.Settle()
	var n int64 = -1
	switch {
	case st.ActualHeader != "":
		n = headerCost(s.Header(), st.ActualHeader)
	case st.ActualTrailer != "":
		if n = headerCost(s.Header(), http.TrailerPrefix+st.ActualTrailer); n < 0 {
			n = headerCost(s.Header(), st.ActualTrailer)
		}
	default:
		n = s.found[i]
	}
	if n >= 0 {
		return n, true
	}
	if s.status >= 400 {
		return 0, true // refused or failed upstream: nothing done to count
	}
	return 0, false
}

// headerCost returns the cost in h's field name, or -1 for none.
func headerCost(h http.Header, name string) int64 {
	v := h.Values(name)
	if len(v) != 1 {
		return -1
	}
	n, ok := sluice.ParseCost(strings.TrimSpace(v[0]))
	if !ok {
		return -1
	}
	return n
}

// finish settles the request's reservations once the handler has
// returned: a JSON body is read now; a client gone leaves the estimates
// standing.
func (s *settleWriter) finish(ctx context.Context, door *sluice.Door[*http.Request], out *sluice.Outcome) {
	if ctx.Err() != nil {
		door.Settle(ctx, out, func(*sluice.CompiledRule) (int64, bool) { return 0, false })
		return
	}
	if s.fields && !s.stream && !s.over && len(s.body) > 0 {
		s.fieldsOf(s.body)
	}
	if s.stream && !s.over && len(s.body) > 0 {
		s.event(s.body) // a last line without its newline
	}
	s.body = nil
	door.Settle(context.WithoutCancel(ctx), out, s.actual)
}
