package grpclimit

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/ratefield"
)

// ruleInfo is what a decision under one compiled rule sends that does not
// depend on the decision: worked out once per rule, not once per call.
type ruleInfo struct {
	policy  []string   // the ratelimit-policy value (sluice.CompiledRule.Policy)
	message string     // a denial's status message
	quota   *anypb.Any // a denial's QuotaFailure detail, marshalled
}

// ruleCache maps the compiled rules of one ruleset to their ruleInfo. A
// reload brings a new ruleset, so a new cache: an old rule's entry goes
// with its ruleset. It is copied on write (a rule is added once per
// ruleset), so reads take no lock.
type ruleCache struct {
	rs *sluice.Ruleset
	m  map[*sluice.CompiledRule]*ruleInfo
}

// infoCache is the Limiter's ruleCache, read lock-free.
type infoCache struct {
	cur atomic.Pointer[ruleCache]
	mu  sync.Mutex // serialises writers
}

// get returns the ruleInfo of rule, a rule of rs (or an override or local
// share derived from one of its rules).
func (c *infoCache) get(rs *sluice.Ruleset, rule *sluice.CompiledRule) *ruleInfo {
	if cur := c.cur.Load(); cur != nil && cur.rs == rs {
		if ri := cur.m[rule]; ri != nil {
			return ri
		}
	}
	ri := newRuleInfo(rule)
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.cur.Load()
	next := &ruleCache{rs: rs}
	if cur != nil && cur.rs == rs {
		next.m = make(map[*sluice.CompiledRule]*ruleInfo, len(cur.m)+1)
		for k, v := range cur.m {
			next.m[k] = v
		}
	} else {
		next.m = make(map[*sluice.CompiledRule]*ruleInfo, 4)
	}
	if len(next.m) >= maxCachedRules {
		// Rules derived per call (a local share under FailLocal) are not
		// kept forever: start over rather than grow without bound.
		clear(next.m)
	}
	next.m[rule] = ri
	c.cur.Store(next)
	return ri
}

// maxCachedRules bounds a ruleCache.
const maxCachedRules = 4096

func newRuleInfo(rule *sluice.CompiledRule) *ruleInfo {
	spec := rule.Rule()
	ri := &ruleInfo{policy: []string{rule.Policy()}, message: deniedMessage + rule.Name()}
	qf := &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject:     "rule:" + spec.Name,
		Description: "limit " + strconv.FormatInt(spec.Limit, 10) + " per " + rule.Per() + " (" + string(spec.Scope) + ")",
	}}}
	if v, err := proto.Marshal(qf); err == nil { // it always marshals
		ri.quota = &anypb.Any{TypeUrl: quotaFailureURL, Value: v}
	}
	return ri
}

// The type URLs of the details a denial carries.
const (
	retryInfoURL    = "type.googleapis.com/google.rpc.RetryInfo"
	quotaFailureURL = "type.googleapis.com/google.rpc.QuotaFailure"
)

// mdBlock holds the per-decision values of a response's metadata and the
// bytes they are made of, in one allocation.
type mdBlock struct {
	vals [ratefield.NumValues]string
	buf  [96]byte
}

// one returns value i of blk as a metadata value: a slice of one.
func (blk *mdBlock) one(i int) []string { return blk.vals[i : i+1 : i+1] }

// decisionMD returns the response metadata of a decision under rule (ri
// being its ruleInfo): the rate-limit fields (package internal/ratefield's,
// as every door sends them), in lower case, and for a denial retry-after.
// Its values are substrings of one buffer, allocated with them: the map
// and that block are all it allocates.
func decisionMD(ri *ruleInfo, rule *sluice.CompiledRule, d algo.Decision) metadata.MD {
	blk := new(mdBlock)
	p := rule.FieldPolicy()
	set := p.Of(d)
	b, ends := p.Append(blk.buf[:0], &set)
	// b is blk.buf, or (a long rule name) a copy that grew: either way
	// bytes no one writes again, so they can be shared as strings.
	blk.vals = ends.Cut(unsafe.String(unsafe.SliceData(b), len(b)))
	n := 5
	if set.RetryAfter > 0 {
		n = 6
	}
	md := make(metadata.MD, n)
	md[MetadataLimit] = blk.one(ratefield.Limit)
	md[MetadataRemaining] = blk.one(ratefield.Remaining)
	md[MetadataReset] = blk.one(ratefield.Reset)
	md[MetadataPolicy] = ri.policy[:1:1]
	md[MetadataRateLimit] = blk.one(ratefield.RateLimit)
	if set.RetryAfter > 0 {
		md[MetadataRetryAfter] = blk.one(ratefield.RetryAfter)
	}
	return md
}

// denial returns the status of a call denied under rule:
// codes.ResourceExhausted with a RetryInfo carrying the exact wait and a
// QuotaFailure naming the rule. The status proto is built directly, the
// RetryInfo encoded by hand and the QuotaFailure taken from ri, rather
// than marshalled per call.
func denial(ri *ruleInfo, d algo.Decision) error {
	dur := max(d.RetryAfter, 0)
	secs, nanos := int64(dur/time.Second), int32(dur%time.Second)
	// RetryInfo{retry_delay (1): Duration{seconds (1), nanos (2)}}.
	var inner [24]byte
	in := inner[:0]
	if secs != 0 {
		in = protowire.AppendTag(in, 1, protowire.VarintType)
		in = protowire.AppendVarint(in, uint64(secs))
	}
	if nanos != 0 {
		in = protowire.AppendTag(in, 2, protowire.VarintType)
		in = protowire.AppendVarint(in, uint64(int64(nanos)))
	}
	p := new(denialProto) // status.FromProto copies it: one allocation for all
	p.value = protowire.AppendTag(p.buf[:0], 1, protowire.BytesType)
	p.value = protowire.AppendBytes(p.value, in)
	p.retry.TypeUrl, p.retry.Value = retryInfoURL, p.value
	p.details[0] = &p.retry
	n := 1
	if ri.quota != nil {
		p.details[1] = ri.quota
		n = 2
	}
	p.st.Code, p.st.Message, p.st.Details = int32(codes.ResourceExhausted), ri.message, p.details[:n:n]
	return status.FromProto(&p.st).Err()
}

// denialProto is the status proto of a denial and its RetryInfo, together.
type denialProto struct {
	st      spb.Status
	details [2]*anypb.Any
	retry   anypb.Any
	value   []byte
	buf     [28]byte
}
