// Package codec is the compact, versioned binary encoding of one key's
// rate-limit state: the bytes a backend stores for each caller.
//
// Every record starts with one header byte: the layout version in the high
// four bits and the algorithm tag in the low four. The integers that follow
// are big-endian; times are Unix nanoseconds; bucket quantities are in
// nano-tokens (1 token = 1e9 units). Each record keeps what its caller spent
// in units that do not depend on the rule's limit, so a changed limit or
// window keeps it.
//
//	GCRA (tag 6), version 2: 10 to 18 bytes
//	+------+--------------------------------+---------------------------+
//	| 0x26 | theoretical arrival time int64 | interval uvarint (ns/token) |
//	+------+--------------------------------+---------------------------+
//
//	token bucket (tag 1), version 2: 17 bytes
//	+------+------------------+---------------------------------------+
//	| 0x21 | updated at int64 | spent, not yet refilled, int64 nano-tokens |
//	+------+------------------+---------------------------------------+
//
//	leaky bucket (tag 2): 17 bytes
//	+------+------------------+--------------------------+
//	| 0x12 | updated at int64 | queued int64 nano-tokens |
//	+------+------------------+--------------------------+
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
//	sliding log (tag 4), version 4: 10 bytes + width bytes per entry
//	+------+------------+-------+--------------------------------------+
//	| 0x44 | base int64 | width | offset ... offset (width bytes each) |
//	+------+------------+-------+--------------------------------------+
//
// A sliding log holds at least one entry. Entry i is the base plus its
// offset in nanoseconds, exactly; offsets never decrease and all take the
// same width, 1 to 8 bytes (see logtable.go), so a step reads any entry at
// once and checks them all in a loop that does not wait on itself. The
// width is what the offset of the newest entry from the base needs: the
// base is at or before the oldest entry and moves to the oldest entry kept
// when an offset outgrows the width, so the width is about that of the
// window in nanoseconds: 3 bytes for windows up to 16 ms, 4 up to 4.3
// seconds, 5 up to 18 minutes, 6 up to 78 hours; an entry repeated at the
// same instant (a request of cost n adds n entries) costs the width too.
// There is no version 3.
//
// The GCRA interval is the one the TAT was counted in, so that a rule whose
// rate changed carries the tokens spent over into its own interval; it
// costs 1 byte per 7 bits (4 bytes at 10 per second, 6 at one per hour).
//
// Earlier layouts, still read:
//
//	sliding log version 2: 0x24, oldest int64, then one delta per further
//	  entry, exact, of 1 to 9 bytes told by its first byte (see log.go); an
//	  entry repeated at the same instant is one byte
//
//	GCRA version 1 (9 bytes): 0x16, TAT int64, no interval (read in the
//	  rule's current interval)
//	token bucket version 1 (17 bytes): 0x11, updated at, tokens left in
//	  nano-tokens (read as spent against the rule's current capacity)
//	sliding log version 1: 0x14, oldest int64, a shift byte, then uvarint
//	  deltas in units of 1<<shift ns: entry times rounded up to window/2^21
//	  (MigrateLog rewrites it as version 2 at the times it stored)
//
// Each carries over exactly when the rule has not changed since it was
// written; otherwise it reads as the earlier release would have read it.
//
// Compatibility: existing layouts never change. A new algorithm takes a new
// tag (a row in the codec's table of tags); a changed layout or meaning takes
// a new version, and decoders keep reading the old one. Decoding any byte
// string either yields a valid state or returns an error; it never panics.
package codec
