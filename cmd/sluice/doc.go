// Command sluice is Sluice's binary: a rate-limiting reverse proxy, Envoy's
// rate-limit service, a replay of access logs under a rules file, and the
// tools to inspect and reset stored state.
//
// Usage:
//
//	sluice <command> [flags]
//
// The commands are:
//
//	demo      show a rate-limited gateway at work and its budgets surviving a restart
//	simulate  decide a JSON-lines trace of requests read from stdin
//	serve     run a rate-limiting reverse proxy in front of an HTTP service
//	rls       serve Envoy's external rate-limit protocol from envoyproxy/ratelimit's configuration files
//	replay    decide an access log under a rules file: who would have been denied, and what limit fits
//	inspect   list the records a store holds (Pebble, bbolt or Redis)
//	reset     unblock a caller: forget its record under a rule (a Pebble or bbolt store stopped; Redis as it runs)
//	version   print the version of this build
//
// Run "sluice <command> -h" for a command's flags.
//
// # simulate
//
//	sluice simulate --algorithm NAME --limit N --window DUR [--burst N]
//	    [--backend memory|pebble|bolt --dir DIR --durability sync|interval]
//
// simulate reads one JSON object per line from stdin,
//
//	{"t": 1700000000.25, "key": "u-1", "cost": 1}
//
// where t is the request's time in Unix seconds (required; any JSON number,
// converted to nanoseconds exactly from its decimal text and rounded to the
// nearest nanosecond, halves away from zero, beyond nine fraction digits),
// key names the caller (a string; absent means "") and cost is what the
// request spends (a JSON integer; absent means 1). Other fields are ignored.
// Blank lines are skipped and produce no output.
//
// For every other line it writes exactly one JSON line to stdout, in order,
// as soon as the request is decided:
//
//	{"allowed":true,"limit":5,"remaining":4,"retry_after":0,"delay":0,"reset":12,"key":"u-1"}
//
// limit is the capacity (the burst where one is set), and retry_after, delay
// and reset are exact seconds. A request the limiter refuses as invalid (a
// cost of zero or less, or above the capacity) gets {"error":"<message>"}
// instead, and the next line is read as usual.
//
// The engine's clock is a fake one set to each line's t, so a trace is
// replayed as fast as it can be read and always gives the same answers.
// Windows are aligned to the Unix epoch. All keys share one namespace and
// are independent of each other; every key seen is kept for the whole run
// (expired records read as absent, so this changes no decision).
//
// With --backend pebble or bolt the records live in DIR, so a trace can be
// split across processes: a second process on the same directory continues
// where the first stopped. With --durability sync every answer is on disk
// before it is printed, so this holds even when the first process is killed
// (SIGKILL) right after printing a line; with interval (the default) a
// killed process forgets at most its last 50 ms of spending.
//
// Exit status: 0 when every line was decided; 2 for a usage error (an
// unknown algorithm, a missing or invalid flag, named in the message) or an
// input line that does not parse (named by its line number), after the
// lines before it were answered; 1 when the store fails.
//
// # demo
//
//	sluice demo [--backend pebble|bolt|memory] [--dir DIR] [--resume] [--out FILE]
//
// demo puts three rules behind a small gateway and then runs the same burst
// through all six algorithms, printing the figures of the reference design's
// demo, each computed by the engine with a fake clock over Pebble under
// var/demo by default. It ends by spending a user's budget; "demo --resume",
// a second process on the same directory, shows it still spent.
//
// # serve
//
//	sluice serve --config FILE --listen ADDR --upstream URL [--admin ADDR]
//
// serve is a rate-limiting reverse proxy: each request is decided under the
// rules of the configuration file (the same YAML the sluice package reads)
// and, when allowed, passed to the upstream URL; a denied one is answered
// 429 with Retry-After. The store section (memory, pebble or bolt, its
// directory, durability and flush interval) is read at start only; the
// rules, the default, the match mode, the identity section and
// on_store_error are reloaded when the file changes or on SIGHUP, and an
// invalid file is rejected whole, the running configuration staying. The
// admin listener, when --admin is given, serves /metrics (Prometheus),
// /healthz ("ok", or 503 and the store's error while a durable store fails
// to write) and /rules (the rules in force, as JSON). A client that
// goes away before the upstream answers is counted
// (sluice_upstream_client_canceled_total) and logged at debug level only;
// other upstream failures are answered 502, counted and logged as errors.
// "sluice serve --help" says all this too. SIGTERM or SIGINT stops accepting,
// drains the requests in flight (for up to 10s), flushes and closes the
// store and exits 0. Exit status 2 means a usage error or an invalid
// configuration (named by file, line and field), 1 any other failure.
//
// # inspect
//
//	sluice inspect --backend pebble|bolt --dir DIR [--namespace NS] [--key K] [--limit N] [--json]
//
// inspect lists the stored records with their rule, caller, algorithm,
// decoded state and time to expiry. The process using the directory must be
// stopped first: the directory lock says so if it is not.
//
// # reset
//
//	sluice reset --rule NAME --key KEY [--config FILE] [--backend pebble|bolt --dir DIR | --backend redis --redis-addr ADDR]
//
// reset forgets one caller's record under a rule, so that its next request
// is decided as its first; KEY is written as in a configuration's overrides
// (user:alice, key: and the raw API key, ip:192.0.2.1). A running gateway
// is reset on its admin listener instead: POST /v1/reset (admin_keys.go).
package main
