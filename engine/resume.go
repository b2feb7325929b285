package engine

import "github.com/sluice-go/sluice/algo"

// Resume returns the reservation of a request whose estimate was spent by
// key under l at the instant at (Unix nanoseconds, as Reservation.At),
// rebuilt from those parts so that a later call, or another process
// sharing the store, settles it. It is for a door whose protocol keeps no
// handle between the request and the moment its cost is known: Envoy's
// rate-limit filter calls once on the request path and once when the
// stream is done, and the first answer can only hand the estimate and the
// instant back to Envoy, which returns them with the second.
//
// Its Settle is a Reservation's: above the estimate it charges the
// difference, even past the limit, and below it refunds where the
// algorithm can take the units spent at at back exactly. An estimate of 0
// makes Settle a charge of the whole actual cost. The Decision is zero but
// for Allowed. Each Resume settles once; resuming the same parts twice and
// settling both settles twice, which the caller must prevent. It reaches
// no store.
func (e *Engine) Resume(l Limit, key string, estimate, at int64) *Reservation {
	return &Reservation{Limit: l, Key: key, Estimate: estimate, At: at, Decision: algo.Decision{Allowed: true}, e: e}
}
