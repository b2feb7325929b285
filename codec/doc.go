// Package codec is the compact, versioned binary encoding of one key's
// rate-limit state: the bytes a backend stores for each caller.
//
// Every record starts with one header byte: the layout version in the high
// four bits and the algorithm tag in the low four. The integers that follow
// are big-endian; times are Unix nanoseconds; bucket levels are in
// nano-tokens (1 token = 1e9 units), so a level survives a change of the
// rule's limit or window unchanged.
//
//	GCRA (9 bytes)
//	+------+-------------------------------+
//	| 0x16 | theoretical arrival time int64 |
//	+------+-------------------------------+
//
//	token bucket (tag 1), leaky bucket (tag 2): 17 bytes
//	+------+-----------------+------------------------+
//	| 0x1t | updated at int64 | level int64 nano-tokens |
//	+------+-----------------+------------------------+
//
//	fixed window (tag 3): 17 bytes
//	+------+--------------------+-------------+
//	| 0x13 | window start int64 | count int64 |
//	+------+--------------------+-------------+
//
//	sliding counter (tag 5): 25 bytes
//	+------+--------------------+-------------+----------------+
//	| 0x15 | window start int64 | count int64 | previous int64 |
//	+------+--------------------+-------------+----------------+
//
//	sliding log (tag 4): 10 bytes + one uvarint per further entry
//	+------+------------------------+-------+------------------------+
//	| 0x14 | oldest entry time int64 | shift | uvarint delta ... delta |
//	+------+------------------------+-------+------------------------+
//
// A sliding log holds at least one entry. Entry i+1 is entry i plus
// delta<<shift nanoseconds; an entry repeated at the same instant (a request
// of cost n adds n entries) is a single zero byte. The shift is chosen from the
// window so that every delta fits in three bytes (see LogShift).
//
// Compatibility: existing layouts never change. A new algorithm takes a new
// tag; a changed layout takes a new version, and decoders keep reading the
// old one. Decoding any byte string either yields a valid state or returns an
// error; it never panics.
package codec
