package grpclimit

import (
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

// decisionMD returns the response metadata of a decision under rule: the
// fields package httplimit sends as headers, in lower case, and for a
// denial retry-after.
func decisionMD(rule *sluice.CompiledRule, d algo.Decision) metadata.MD {
	spec := rule.Rule()
	reset := ceilSeconds(d.Reset)
	// One buffer, one string, its substrings: few allocations in all.
	var buf [256]byte
	b := buf[:0]
	var ends [6]int
	b = strconv.AppendInt(b, d.Limit, 10)
	ends[0] = len(b)
	b = strconv.AppendInt(b, d.Remaining, 10)
	ends[1] = len(b)
	b = strconv.AppendInt(b, reset, 10)
	ends[2] = len(b)
	b = appendSFString(b, spec.Name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, spec.Limit, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, ceilSeconds(spec.Window), 10)
	ends[3] = len(b)
	b = appendSFString(b, spec.Name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
	ends[4] = len(b)
	n := 5
	if !d.Allowed {
		b = strconv.AppendInt(b, retryAfterSeconds(d.RetryAfter), 10)
		ends[5] = len(b)
		n = 6
	}
	s := string(b)
	vals := make([]string, n)
	start := 0
	for i := range n {
		vals[i] = s[start:ends[i]]
		start = ends[i]
	}
	md := make(metadata.MD, n)
	md[MetadataLimit] = vals[0:1:1]
	md[MetadataRemaining] = vals[1:2:2]
	md[MetadataReset] = vals[2:3:3]
	md[MetadataPolicy] = vals[3:4:4]
	md[MetadataRateLimit] = vals[4:5:5]
	if !d.Allowed {
		md[MetadataRetryAfter] = vals[5:6:6]
	}
	return md
}

// denial returns the status of a call denied under rule:
// codes.ResourceExhausted with a RetryInfo carrying the exact wait and a
// QuotaFailure naming the rule.
func denial(rule *sluice.CompiledRule, d algo.Decision) error {
	st := status.New(codes.ResourceExhausted, deniedMessage+rule.Name())
	spec := rule.Rule()
	withDetails, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     "rule:" + spec.Name,
			Description: "limit " + strconv.FormatInt(spec.Limit, 10) + " per " + spec.Window.String() + " (" + string(spec.Scope) + ")",
		}}},
	)
	if err != nil { // the details always marshal; keep the bare status if not
		return st.Err()
	}
	return withDetails.Err()
}

// retryAfterSeconds renders a denial's wait as retry-after does: whole
// seconds, rounded up, never below 1 (0 would invite an immediate retry).
func retryAfterSeconds(d time.Duration) int64 {
	return max(1, ceilSeconds(d))
}

// appendSFString appends s as a structured field string (RFC 8941): in
// double quotes, with '"' and '\' escaped. Bytes a string may not hold
// (controls, non-ASCII) become '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// ceilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}
