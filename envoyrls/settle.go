package envoyrls

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
)

// SettleKey is the key of the entry that makes a descriptor a settle, the
// descriptor of the call Envoy makes when the stream is done (a rate_limits
// entry with apply_on_stream_done): it is the descriptor's last entry, it
// takes no part in matching, and its value is the handle that the
// request-path answer gave Envoy in its dynamic metadata, under the field
// of the same name, or SettleCharge. It is also that field's name.
const SettleKey = "sluice_settle"

// SettleCharge is the SettleKey value of a settle with no estimate to
// settle: the whole actual cost is charged, even past the limit, as when
// the request path only checks (Envoy AI Gateway's model). A handle from
// the request path is the exact model: see the package doc's Settling.
const SettleCharge = "charge"

// Settling, in Envoy's two calls: a limit marked settle_on_stream_done
// spends its request-path cost (the estimate, a hits_addend Envoy reads
// from a formatter) as any limit does, all or nothing with the request's
// other descriptors, and a refused request spends nothing. When the
// request was allowed and every settle_on_stream_done limit it matched
// spent the same estimate, the answer's dynamic metadata carries the
// handle "ESTIMATE@INSTANT" under SettleKey (INSTANT is the server's clock
// in Unix nanoseconds, read before the decision); Envoy keeps it as the
// stream's dynamic metadata (namespace envoy.filters.http.ratelimit). The
// stream-done call's descriptor reads it back with a metadata action as
// its last entry, and its hits_addend is the actual cost: the limit it
// matches settles actual − estimate, charged even past the limit (the
// algorithm's bounded debt, package algo's Charge) or refunded where the
// algorithm can take the units spent at INSTANT back (algo's Refund). The
// two calls together charge the actual cost once. A refused request has
// no handle, so its stream-done descriptor is not sent (a metadata action
// without a value drops it), and it stays at no cost.

// parseSettle reads a SettleKey value: ESTIMATE@INSTANT, or SettleCharge
// (an estimate of 0).
func parseSettle(v string) (estimate, at int64, err error) {
	if v == SettleCharge {
		return 0, 0, nil
	}
	e, t, ok := strings.Cut(v, "@")
	if ok {
		estimate, err = strconv.ParseInt(e, 10, 64)
		if err == nil {
			at, err = strconv.ParseInt(t, 10, 64)
		}
	}
	if !ok || err != nil || estimate < 0 {
		return 0, 0, errors.New("want ESTIMATE@INSTANT, the handle of the request path's answer, or " + SettleCharge)
	}
	return estimate, at, nil
}

// settleHandle returns the handle of a request decided at now whose items
// have spent, or "" when it has none: no settle_on_stream_done limit spent,
// or two spent different estimates, or one matched but did not spend (a
// shadow_mode or quota_mode denial, a hits_addend of 0). Its estimates
// then stand, as a reservation never settled keeps its estimate.
func (s *Server) settleHandle(items []item, now int64) string {
	est := int64(-1)
	for i := range items {
		it := &items[i]
		if it.settle || it.limit == nil || !it.limit.Settle {
			continue
		}
		if !it.spent || (est >= 0 && it.cost != est) {
			s.logNoHandle(it.limit)
			return ""
		}
		est = it.cost
	}
	if est < 0 {
		return ""
	}
	return strconv.FormatInt(est, 10) + "@" + strconv.FormatInt(now, 10)
}

// settle settles a stream-done descriptor's item: its estimate, spent at
// its instant, with its cost, through the engine's Resume. A handle on a
// limit not marked settle_on_stream_done settles nothing (the request path
// gave that limit no estimate to settle); SettleCharge charges any limit.
func (s *Server) settle(ctx context.Context, it *item) error {
	l := it.limit
	if l.limit.Algorithm == nil || (it.estimate > 0 && !l.Settle) {
		return nil
	}
	st, err := s.eng.Resume(l.limit, it.key, it.estimate, it.at).Settle(ctx, it.cost)
	if err != nil {
		return err
	}
	it.settled, it.d = true, st.Decision
	if m := s.opts.Metrics; m != nil {
		m.charged.Add(uint64(st.Charged))
		m.refunded.Add(uint64(st.Refunded))
	}
	if it.d.Limit == 0 {
		// Nothing to do (the actual cost was the estimate): what the
		// descriptor has, for its status.
		d, err := s.has(ctx, l, it.key)
		if err != nil {
			return err
		}
		it.d = d
	}
	return nil
}

// logNoHandle logs, at most once a second, a request that spent on a
// settle_on_stream_done limit but gets no handle.
func (s *Server) logNoHandle(l *Limit) {
	if ok, suppressed := s.noHandleLog.Let(time.Now().UnixNano()); ok {
		s.log.Warn("envoyrls: no settle handle: the request's settle_on_stream_done limits did not all spend one estimate; their estimates stand",
			"limit", l.Path, "suppressed", suppressed)
	}
}
