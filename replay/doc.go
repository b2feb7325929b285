// Package replay decides a recorded access log under a rules file, as
// sluice serve would have decided it, and reports what the rules would have
// denied and whom.
//
// A log (the nginx/Apache combined format, optionally with fields appended,
// or JSON lines) is read into Records, each the request line, the client's
// address and identity headers as the proxy saw them, and the time.
// Replayer decides each Record with the same parts serve uses, through the
// same sluice.Door that httplimit's middleware wraps: the
// configuration's Ruleset matches it (most specific rule, or every rule in
// all mode), its identity.Identifier builds the caller's key from the
// logged peer address, X-Forwarded-For, user and API key, and an
// engine.Engine over an in-memory store decides it on a FakeClock set to
// the Record's time. Its decisions are therefore serve's, request for
// request (a property test sends the same requests through
// httplimit's middleware and compares).
//
// Logs are written when a request completes, so their lines are out of
// time order by up to the longest request. A Source keeps a bounded
// reorder buffer (Options.Reorder, by time) and releases lines in time
// order; a line older than the last one released is decided at that
// line's time and counted as late. Lines that do not parse are counted,
// and the first few kept with their file and line number; they never stop
// a replay.
//
// The Report says, per rule, how many requests matched, how many would
// have been denied and of which callers, and, from each caller's peak use
// of the rule (the smallest limit under which it would never have been
// denied, computed exactly under the rule's algorithm: see Need), the
// smallest limit that would have left a chosen share of callers never
// denied. WriteText renders it for a terminal; WriteHTML writes a
// self-contained page with SVG plots.
//
// A Replayer is not safe for concurrent use; Run drives one or two from one
// goroutine.
package replay
