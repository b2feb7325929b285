package sluice

import (
	"errors"
	"fmt"
	"net/textproto"
	"slices"
	"strings"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/internal/clip"
	"github.com/sluice-go/sluice/internal/ratefield"
)

// Errors about rules and configuration. Check them with errors.Is.
var (
	// ErrInvalidRule is matched by every *RuleError: a rule that could
	// never be enforced as written.
	ErrInvalidRule = errors.New("sluice: invalid rule")
	// ErrInvalidConfig is matched by every *ConfigError: a configuration
	// file that does not parse or does not validate.
	ErrInvalidConfig = errors.New("sluice: invalid config")
)

// AnyMethod is the Rule.Method that matches every HTTP method.
const AnyMethod = "*"

// The methods matching treats apart (net/http's names, without importing
// it: package identity, which a gRPC door uses, imports this one).
const (
	methodGet  = "GET"
	methodHead = "HEAD"
)

// Scope says whose budget a rule counts against.
type Scope string

// The scopes a rule may have.
const (
	// ScopeUser counts per user id; an anonymous caller falls back to its
	// IP address.
	ScopeUser Scope = "user"
	// ScopeAPIKey counts per API key; a caller without one falls back to
	// its IP address.
	ScopeAPIKey Scope = "api_key"
	// ScopeIP counts per client IP address (IPv6 grouped by a prefix).
	ScopeIP Scope = "ip"
	// ScopeGlobal counts every caller against one shared budget.
	ScopeGlobal Scope = "global"
)

// Scopes lists the four fixed scopes, in a stable order. A scope may
// also count by a caller attribute: ScopeHeader, ScopeAttr, ScopeParam.
var Scopes = []Scope{ScopeUser, ScopeAPIKey, ScopeIP, ScopeGlobal}

// The prefixes of the scopes of a caller attribute.
const (
	scopeHeader = "header:"
	scopeAttr   = "attr:"
	scopeParam  = "param:"
)

// ScopeHeader returns the scope "header:" + name, counting per value of
// the request header name (such as X-Org-ID), set by a trusted
// authenticating proxy: the header is believed only on a request whose
// peer is a trusted proxy, as the plan header is (package identity). A
// caller without the header, or whose peer is not trusted, falls back to
// its IP address, as an anonymous caller of a user rule does.
func ScopeHeader(name string) Scope { return Scope(scopeHeader + name) }

// ScopeAttr returns the scope "attr:" + name, counting per value of the
// caller attribute name (an organisation, a team, a claim of a verified
// token) that the program's identity function returns
// (identity.Caller.With). A caller without the attribute falls back to
// its IP address.
func ScopeAttr(name string) Scope { return Scope(scopeAttr + name) }

// ScopeParam returns the scope "param:" + name, counting per value of the
// parameter {name} of the rule's path pattern (Rule.Path): the Door makes
// the key, "param:" and the value, from the path it matched. A parameter
// is never missing: the pattern matched a segment for it (a {name...} may
// match an empty rest, and its key is then "param:").
func ScopeParam(name string) Scope { return Scope(scopeParam + name) }

// Header returns the header a scope "header:NAME" counts by, or "".
func (s Scope) Header() string { return s.attribute(scopeHeader) }

// Attr returns the attribute a scope "attr:NAME" counts by, or "".
func (s Scope) Attr() string { return s.attribute(scopeAttr) }

// Param returns the path parameter a scope "param:NAME" counts by, or "".
func (s Scope) Param() string { return s.attribute(scopeParam) }

func (s Scope) attribute(prefix string) string {
	if len(s) > len(prefix) && string(s[:len(prefix)]) == prefix {
		return string(s[len(prefix):])
	}
	return ""
}

// MaxAttrLen is the longest value, in bytes, of a header, attribute or
// path parameter a rule counts by (ScopeHeader, ScopeAttr, ScopeParam),
// as of a user id: a longer one is refused as a bad identity
// (ErrBadIdentity), not cut, so a key a client chooses stays bounded.
const MaxAttrLen = 256

// ErrBadIdentity is matched by every error that a request's identity (its
// headers, the Caller a program supplied, a path parameter a rule counts
// by) is unusable: the client's fault, answered as a bad request.
// identity.ErrBadIdentity is this error.
var ErrBadIdentity = errors.New("sluice: bad caller identity")

// scopeSyntax lists the scopes, for errors.
const scopeSyntax = "user, api_key, ip, global, header:NAME, attr:NAME or param:NAME"

// check says why s is not a valid scope, or "". A param scope's name is
// checked against the rule's path pattern by the rule.
func (s Scope) check() string {
	switch s {
	case ScopeUser, ScopeAPIKey, ScopeIP, ScopeGlobal:
		return ""
	}
	switch kind, name, _ := strings.Cut(string(s), ":"); kind {
	case "header":
		if !validHeaderName(name) {
			return fmt.Sprintf("header: want a header name, such as header:X-Org-ID, got %s", clip.Quote(name, clip.Max))
		}
		return ""
	case "attr":
		if !validAttrName(name) {
			return fmt.Sprintf("attr: want an attribute name of 1 to 64 letters, digits, '_', '-' or '.', such as attr:org, got %s", clip.Quote(name, clip.Max))
		}
		return ""
	case "param":
		if !validParamName(name) {
			return fmt.Sprintf("param: want a parameter of the rule's path, such as param:org for path /v1/orgs/{org}/orders, got %s", clip.Quote(name, clip.Max))
		}
		return ""
	}
	return fmt.Sprintf("must be one of %s, got %s", scopeSyntax, clip.Quote(string(s), clip.Max))
}

// validHeaderName reports an HTTP header name (an RFC 9110 token).
func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return s != ""
}

// validAttrName reports an attribute name: what ValidPlan takes.
func validAttrName(s string) bool { return ValidPlan(s) }

// Rule is one configured limit: which requests it covers (Method and
// PathPrefix), whose budget they spend (Scope) and how much there is
// (Algorithm, Limit, Window, Burst). A Rule is a plain value; a Ruleset
// validates and compiles it.
//
// Burst, as in package algo, is the capacity of a bucket algorithm
// (token_bucket, leaky_bucket, gcra) while the rate stays Limit per Window:
// Limit 60, Window 1m, Burst 10 reads "one a second on average, ten at once".
// The window algorithms refuse a burst.
type Rule struct {
	// Name identifies the rule in errors, headers and metrics, and is the
	// namespace of its counters unless Counter says otherwise. Required.
	Name string
	// Counter, when set, is the namespace of the rule's counters in place
	// of its Name, so that rules naming one counter count in one budget:
	// the plan variants of one limit (free 100 a month, pro 10,000), so
	// that a caller moved to another plan mid-window keeps what it has
	// spent instead of starting afresh. Rules sharing a counter must have
	// the same window algorithm (fixed_window or sliding_counter, whose
	// record is the count spent), window and scope: one record, under the
	// same keys. Their limits may differ, each deciding on the amount spent
	// under its own. Empty means Name: rules never share a counter unless
	// they say so.
	Counter string
	// Method is the HTTP method the rule covers, exactly as sent (upper
	// case, such as "GET"), or AnyMethod. Empty means AnyMethod. A GET
	// rule covers HEAD requests too, unless a HEAD rule of the same path
	// prefix and host exists (Ruleset.AppendMatch).
	Method string
	// PathPrefix is the start of the request paths the rule covers; it must
	// start with "/". Matching is by plain string prefix, as in the
	// reference design: "/api/orders" also covers "/api/orders-archive".
	// A request's path is matched in canonical form (CanonicalPath:
	// repeated slashes merged, "." and ".." segments removed), so a prefix
	// holding "//", "/./" or "/../" is refused: it could match nothing.
	PathPrefix string
	// Path, instead of PathPrefix, is a pattern of the whole request
	// paths the rule covers, such as "/v1/orgs/{org}/orders": literal
	// segments and parameters, a last "{name...}" taking the rest of the
	// path (see pattern.go). A rule has a PathPrefix or a Path, not both.
	// A scope "param:NAME" counts by one of its parameters.
	Path string
	// Host, when set, is the host the rule covers (the request's Host, or
	// :authority, without its port, in lower case): an exact name such as
	// "api.example.com", or "*.example.com" for every name under it (not
	// the name itself). Empty covers every host. A rule naming a host is
	// more specific than one that does not, whatever their paths.
	Host string
	// Scope says whose budget a request spends. Required.
	Scope Scope
	// Algorithm is one of algo.Names. Required.
	Algorithm algo.Name
	// Limit is how much may be spent per Window. Required, positive.
	Limit int64
	// Window is the period Limit applies to. Required, positive.
	Window time.Duration
	// Burst is the capacity of a bucket algorithm; zero means Limit.
	Burst int64
	// Cost is what one request spends; zero means 1. It may not exceed the
	// capacity (Burst, or Limit), since such a request could never pass.
	Cost int64
	// Shadow, when true, makes the rule a trial: its requests are decided
	// and spent as under any rule, but it never denies one. A door counts
	// what it would have denied (ShadowObserver) and, unless told to,
	// sends no rate-limit fields for it. Shadow rules are matched apart
	// from the enforced ones (see Ruleset.AppendMatch), so adding one never
	// changes what the enforced rules decide: the way to roll out a new
	// limit, or a tighter one, and watch what it would do first.
	Shadow bool
	// Group, when set, names a group of rules decided together, such as
	// a hierarchy organisation → team → user, each level a budget (see
	// group.go): in most_specific mode, every rule of a group covering a
	// request applies to it, beside the most specific rule outside
	// groups, and nothing is spent unless every one allows. Empty: the
	// rule competes for most specific.
	Group string
	// Plan, when set, limits the rule to callers of that plan (see
	// plan.go: ValidPlan, and Ruleset.AppendMatch for which rule wins).
	// Empty means every caller.
	Plan string
	// Settle, when set, makes a request's cost under the rule an
	// estimate, settled with its actual cost once the response has ended
	// (see Settle); Cost is then the estimate when the request names none.
	// Nil: the cost is final. A shadow rule cannot settle.
	Settle *Settle
	// MaxHold is, for a concurrency rule (Algorithm algo.ConcurrencyName:
	// at most Limit requests in flight at once), the longest a request
	// holds its slot: a slot not given back by then comes back by
	// itself. Required for a concurrency rule, which takes no Window;
	// refused on any other.
	MaxHold time.Duration
	// RetryAfter is, for a concurrency rule, the wait a denied request is
	// told (no exact wait exists: a slot comes back when a request ends).
	// Zero means DefaultRetryAfter; refused on any other rule.
	RetryAfter time.Duration

	// Calendar, when set, aligns a fixed_window or sliding_counter rule's
	// windows to the calendar: "day", "week", "month" or "year", of the
	// time zone Timezone (an IANA name such as "Europe/Berlin"; empty
	// means UTC), each window starting at Anchor (empty: midnight of the
	// first day; see rule_calendar.go for its forms, such as "15" for a
	// billing day). Window is then left out: the calendar's windows vary
	// in length. Empty: windows of Window's length from the Unix epoch.
	Calendar string
	Timezone string
	Anchor   string
}

// DefaultRetryAfter is the wait a concurrency rule tells a denied request
// when its RetryAfter is not set.
const DefaultRetryAfter = time.Second

// retryAfter returns the wait a concurrency rule tells a denied request:
// its RetryAfter, or DefaultRetryAfter.
func (r *Rule) retryAfter() time.Duration {
	if r.RetryAfter > 0 {
		return r.RetryAfter
	}
	return DefaultRetryAfter
}

// RuleError reports what is wrong with one rule. It matches
// ErrInvalidRule and unwraps to the cause (an *algo.ParamError,
// algo.ErrUnknownAlgorithm, algo.ErrCostExceedsCapacity, …) where there is
// one.
type RuleError struct {
	// Rule is the rule's name.
	Rule string
	// Field is the configuration name of the offending field, such as
	// "window" or "path_prefix".
	Field string
	// Reason says what is wrong with it.
	Reason string
	// Err is the underlying error, or nil.
	Err error
	// Index is the rule's position in the rules given to NewRuleset, or -1
	// for the default rule and for a rule checked alone (Rule.Validate).
	Index int
}

// Error returns `rule "name": field: reason`.
func (e *RuleError) Error() string {
	return fmt.Sprintf("rule %q: %s: %s", e.Rule, e.Field, e.Reason)
}

// Unwrap returns the underlying error, if any.
func (e *RuleError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalidRule.
func (e *RuleError) Is(target error) bool { return target == ErrInvalidRule }

// Validate reports the first thing wrong with r as a *RuleError naming the
// rule and the field, or nil when a Ruleset would accept it.
func (r Rule) Validate() error {
	_, err := r.compile()
	return err
}

func (r Rule) fail(field, format string, args ...any) *RuleError {
	return &RuleError{Rule: r.Name, Field: field, Reason: fmt.Sprintf(format, args...), Index: -1}
}

// compile validates r and builds its algorithm.
func (r Rule) compile() (*CompiledRule, error) {
	if r.Name == "" {
		return nil, r.fail("name", "must not be empty")
	}
	if r.Method == "" {
		r.Method = AnyMethod
	}
	if r.Cost == 0 {
		r.Cost = 1
	}
	if r.Method != AnyMethod && !isMethod(r.Method) {
		return nil, r.fail("method", "must be %q or an HTTP method in upper case such as GET, got %q", AnyMethod, r.Method)
	}
	var pat *pattern
	if r.Path != "" {
		if r.PathPrefix != "" {
			return nil, r.fail("path", "a rule has a path_prefix or a path pattern, not both")
		}
		var reason string
		if pat, reason = compilePattern(r.Path); reason != "" {
			return nil, r.fail("path", "%s", reason)
		}
	} else if reason := checkPrefix(r.PathPrefix); reason != "" {
		return nil, r.fail("path_prefix", "%s", reason)
	}
	if r.Host != "" && !validHost(r.Host) {
		return nil, r.fail("host", "want a host name in lower case, such as api.example.com, or *.example.com for the names under it, with no port, got %q", r.Host)
	}
	if reason := r.Scope.check(); reason != "" {
		return nil, r.fail("scope", "%s", reason)
	}
	if h := r.Scope.Header(); h != "" {
		// As identity reads header fields: X-Org-ID is X-Org-Id.
		r.Scope = ScopeHeader(textproto.CanonicalMIMEHeaderKey(h))
	}
	if p := r.Scope.Param(); p != "" && (pat == nil || !slices.Contains(pat.params(), p)) {
		names := "it has no path pattern"
		if pat != nil {
			names = fmt.Sprintf("its path %s has %v", clip.Quote(r.Path, clip.Max), pat.params())
		}
		return nil, r.fail("scope", "param:%s names no parameter of the rule's path: %s", p, names)
	}
	if r.Plan != "" && !ValidPlan(r.Plan) {
		return nil, r.fail("plan", planSyntax+", got %q", r.Plan)
	}
	if r.Group != "" {
		switch {
		case !ValidPlan(r.Group):
			return nil, r.fail("group", "want a group name of 1 to 64 letters, digits, '_', '-' or '.', starting with a letter or digit, got %s", clip.Quote(r.Group, clip.Max))
		case r.Shadow:
			return nil, r.fail("group", "a shadow rule is matched apart from the enforced ones and cannot be in a group")
		}
	}
	if r.Plan != "" && r.Shadow {
		return nil, r.fail("plan", "a shadow rule applies to every caller and cannot name a plan, got %q", r.Plan)
	}
	if r.Settle != nil {
		if r.Shadow {
			return nil, r.fail("settle", "a shadow rule spends what it would have and settles nothing")
		}
		if field, reason := r.Settle.check(); reason != "" {
			return nil, r.fail(field, "%s", reason)
		}
	}
	window := r.Window
	if r.Algorithm == algo.ConcurrencyName {
		if err := r.checkConcurrency(); err != nil {
			return nil, err
		}
		window = r.MaxHold
	} else if r.MaxHold != 0 || r.RetryAfter != 0 {
		field := "max_hold"
		if r.MaxHold == 0 {
			field = "retry_after"
		}
		return nil, r.fail(field, "only a concurrency rule takes it, not %s", r.Algorithm)
	}
	cal, err := r.calendar() // rule_calendar.go
	if err != nil {
		return nil, err
	}
	a, err := algo.New(r.Algorithm, algo.Params{Limit: r.Limit, Window: window, Burst: r.Burst, Calendar: cal})
	if err != nil {
		var pe *algo.ParamError
		if errors.As(err, &pe) {
			field := pe.Field
			if field == "window" && r.Algorithm == algo.ConcurrencyName {
				field = "max_hold"
			}
			return nil, &RuleError{Rule: r.Name, Field: field, Reason: pe.Reason, Err: pe, Index: -1}
		}
		return nil, &RuleError{Rule: r.Name, Field: "algorithm", Reason: fmt.Sprintf("must be one of %v or %s, got %q", algo.Names, algo.ConcurrencyName, r.Algorithm), Err: err, Index: -1}
	}
	if err := algo.CheckCost(a, r.Cost); err != nil {
		// The reason is written here from the figures, not taken from
		// err's text: the error is matched by errors.Is alone.
		reason := fmt.Sprintf("must be positive, got %d", r.Cost)
		if errors.Is(err, algo.ErrCostExceedsCapacity) {
			reason = fmt.Sprintf("cost exceeds capacity: cost %d can never fit a capacity of %d", r.Cost, a.Params().Capacity())
		}
		return nil, &RuleError{Rule: r.Name, Field: "cost", Reason: reason, Err: err, Index: -1}
	}
	ns := r.Name
	if r.Counter != "" {
		if !ValidPlan(r.Counter) {
			return nil, r.fail("counter", "want a counter name of 1 to 64 letters, digits, '_', '-' or '.', starting with a letter or digit, got %s", clip.Quote(r.Counter, clip.Max))
		}
		ns = r.Counter
	}
	c := &CompiledRule{rule: r, prefix: r.PathPrefix, pattern: pat, limit: engine.Limit{Namespace: ns, Algorithm: a}}
	c.toks = c.pathTokens()
	c.compileFields() // fields.go
	return c, nil
}

// checkConcurrency checks the fields of a concurrency rule.
func (r Rule) checkConcurrency() error {
	switch {
	case r.MaxHold <= 0:
		return r.fail("max_hold", "a concurrency rule needs the longest a request holds its slot, such as 30s; got %v", r.MaxHold)
	case r.Window != 0:
		return r.fail("window", "a concurrency rule takes max_hold, the longest a request holds its slot, not a window; got %v", r.Window)
	case r.RetryAfter < 0:
		return r.fail("retry_after", "must be positive when given, got %v", r.RetryAfter)
	case r.Cost != 1:
		return r.fail("cost", "a request of a concurrency rule takes one slot; got %d", r.Cost)
	case r.Shadow:
		// A shadow rule spends and never refuses: its slots would be
		// held with no answer to tell, and counted by no one.
		return r.fail("shadow", "a concurrency rule cannot be a shadow rule")
	case r.Settle != nil:
		return r.fail("settle", "a concurrency rule holds a slot, it has no cost to settle; settle on a rate rule beside it (match: all)")
	}
	return nil
}

// isMethod reports whether m is an HTTP method token (RFC 9110) without
// lower-case letters: methods are case-sensitive, and a rule for "get" would
// never match what clients send.
func isMethod(m string) bool {
	for i := 0; i < len(m); i++ {
		c := m[i]
		if c >= 'a' && c <= 'z' || !isTokenChar(c) {
			return false
		}
	}
	return m != ""
}

// isTokenChar reports whether c may appear in an HTTP token (RFC 9110 tchar).
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// CompiledRule is a validated Rule ready to decide requests: its defaults
// filled in and its algorithm built. It is immutable and safe to share.
type CompiledRule struct {
	// What matching reads of every rule it passes over, first.
	prefix string // PathPrefix as paths are compared with it: case-folded in a ruleset of PathCaseInsensitive
	// pattern is Path compiled, its literals case-folded as prefix is;
	// nil for a rule of a PathPrefix.
	pattern *pattern
	rule    Rule
	toks    []pathTok // the path as specificity compares it (pattern.go)
	limit   engine.Limit
	// origin is the rule as configured that this one derives from: an
	// override's rule (Ruleset.Override), a local share's
	// (LocalFallback.shareOf); nil for a rule as configured.
	origin *CompiledRule
	// group is the hierarchy of the rule's group (group.go), and level
	// the place of the rule's scope in it, from 0, the widest; nil and 0
	// for a rule in no group, and in a rule derived from another
	// (origin's are read).
	group *groupLevels
	level int

	// The rate-limit fields' parts that depend on the rule alone
	// (fields.go).
	fields ratefield.Policy // what its rate-limit fields carry whatever the decision
}

// configured returns the rule as configured that c derives from, or c.
func (c *CompiledRule) configured() *CompiledRule {
	if c.origin != nil {
		return c.origin
	}
	return c
}

// Rule returns the rule as compiled, with Method and Cost defaults filled in.
func (c *CompiledRule) Rule() Rule { return c.rule }

// Name returns the rule's name.
func (c *CompiledRule) Name() string { return c.rule.Name }

// Scope returns whose budget the rule counts against.
func (c *CompiledRule) Scope() Scope { return c.rule.Scope }

// Cost returns what one request spends under the rule.
func (c *CompiledRule) Cost() int64 { return c.rule.Cost }

// Settle returns the rule's Settle: nil when its cost is final.
func (c *CompiledRule) Settle() *Settle { return c.rule.Settle }

// Shadow reports whether the rule is a shadow rule: decided and counted,
// but never denying (Rule.Shadow).
func (c *CompiledRule) Shadow() bool { return c.rule.Shadow }

// Limit returns the engine limit that enforces the rule: its namespace is
// the rule's counter (Rule.Counter) or else its name, its algorithm the
// rule's. Rules that keep their name and
// algorithm across a reload keep their callers' spent budget; a changed
// algorithm writes a record of another kind, so its keys start fresh.
func (c *CompiledRule) Limit() engine.Limit { return c.limit }

// request returns the engine request that spends the rule's cost by key.
func (c *CompiledRule) request(key string) engine.Request {
	return engine.Request{Limit: c.limit, Key: key, Cost: c.rule.Cost}
}

// covers reports whether the rule c, one of the rules from, covers a
// request of shape q (its path in the ruleset's match form, matchPath),
// whatever q's plan (a ruleset chooses the rules a plan's caller is matched
// against, from).
//
// A GET rule covers HEAD requests too, as a HEAD is a GET without its
// body (nginx's limit_req counts every method alike), unless from holds a
// HEAD rule of the same path prefix and host: a rule naming HEAD takes
// those over.
func (rs *Ruleset) covers(from []*CompiledRule, c *CompiledRule, q RequestShape) bool {
	if c.pattern == nil {
		if !strings.HasPrefix(q.Path, c.prefix) {
			return false
		}
	} else if !c.pattern.match(q.Path) {
		return false
	}
	if c.rule.Host != "" && !hostMatches(c.rule.Host, q.Host) {
		return false
	}
	switch c.rule.Method {
	case AnyMethod, q.Method:
		return true
	case methodGet:
		return q.Method == methodHead && !(rs.heads && headRuleFor(from, c))
	}
	return false
}

// headRuleFor reports whether from holds a HEAD rule of c's path prefix
// and host.
func headRuleFor(from []*CompiledRule, c *CompiledRule) bool {
	for _, o := range from {
		if o.rule.Method == methodHead && o.samePath(c) && o.rule.Host == c.rule.Host {
			return true
		}
	}
	return false
}

// hostMatches reports whether the host pattern (a name, or *.name) covers
// host.
func hostMatches(pattern, host string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		return len(host) > len(suffix) && strings.HasSuffix(host, suffix)
	}
	return host == pattern
}

// validHost reports a host pattern Rule.Host takes: labels of lower-case
// letters, digits and hyphens, or an IP address, the first label "*" for
// a wildcard.
func validHost(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// samePath reports whether c and o cover the same paths: the same
// prefix, or the same pattern.
func (c *CompiledRule) samePath(o *CompiledRule) bool {
	return c.prefix == o.prefix && (c.pattern == nil) == (o.pattern == nil) && (c.pattern == nil || c.pathText() == o.pathText())
}

// pathText returns the rule's path pattern as compared: case-folded in a
// ruleset of PathCaseInsensitive.
func (c *CompiledRule) pathText() string {
	if c.pattern == nil {
		return c.prefix
	}
	var b strings.Builder
	for _, t := range c.toks {
		switch t.kind {
		case tokLit:
			b.WriteByte(t.b)
		case tokParam:
			b.WriteString("{}")
		case tokRest:
			b.WriteString("{...}")
		}
	}
	return b.String()
}

// pathTokens returns the rule's path as specificity compares it.
func (c *CompiledRule) pathTokens() []pathTok {
	if c.pattern != nil {
		return c.pattern.toks
	}
	return prefixTokens(c.prefix)
}

// paramKey returns the key a rule scoped param:NAME counts the request
// of path (in the ruleset's match form, as the Door has it) under:
// "param:" and the parameter's value. It is the Door's to call; the error
// (a value over MaxAttrLen bytes) matches ErrBadIdentity.
func (c *CompiledRule) paramKey(path string) (string, error) {
	v, ok := c.pattern.param(path, c.rule.Scope.Param())
	if !ok {
		return "", fmt.Errorf("%w: the path does not match rule %q's pattern", ErrBadIdentity, c.rule.Name)
	}
	if len(v) > MaxAttrLen {
		return "", fmt.Errorf("%w: path parameter {%s} is %d bytes, over %d", ErrBadIdentity, c.rule.Scope.Param(), len(v), MaxAttrLen)
	}
	return scopeParam + v, nil
}

// moreSpecific orders rules most specific first: a rule naming a host
// (an exact one over a wildcard), then the more specific path (the longer
// prefix; with patterns, see pattern.go), then an exact method over
// AnyMethod.
//
// Paths are compared as comparePaths orders them when patterns is true (a
// rule of the ruleset has a path pattern), else by the prefixes' lengths
// alone, as before patterns: both put the longer of two prefixes that
// cover one path first, and one comparison is used throughout a sort so
// that it stays a consistent order.
func moreSpecific(a, b *CompiledRule, patterns bool) int {
	if ha, hb := hostRank(a.rule.Host), hostRank(b.rule.Host); ha != hb {
		return hb - ha
	}
	if !patterns {
		if la, lb := len(a.prefix), len(b.prefix); la != lb {
			return lb - la
		}
	} else if d := comparePaths(a.toks, b.toks); d != 0 {
		return d
	}
	ea, eb := a.rule.Method != AnyMethod, b.rule.Method != AnyMethod
	switch {
	case ea && !eb:
		return -1
	case eb && !ea:
		return 1
	}
	return 0
}

// hostRank ranks host patterns by specificity: an exact name over a
// wildcard (the longer the more specific), either over none.
func hostRank(h string) int {
	switch {
	case h == "":
		return 0
	case strings.HasPrefix(h, "*."):
		return 1 + len(h)
	}
	return 1 << 20
}
