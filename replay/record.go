package replay

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/sluice-go/sluice/identity"
)

// Record is one request read from a log: what sluice serve, standing where
// the logging proxy stands, would have seen of it.
type Record struct {
	// Time is when the request was logged, in Unix nanoseconds.
	Time int64
	// Method is the request method, as logged ("GET").
	Method string
	// Path is the request's path as net/http's Request.URL.Path holds it:
	// percent-decoded, without the query.
	Path string
	// Peer is the connection's peer address ($remote_addr): a bare
	// address, or host:port.
	Peer string
	// XForwardedFor is the X-Forwarded-For header as received, empty when
	// absent ("-" in a log).
	XForwardedFor string
	// Forwarded is the Forwarded header as received, empty when absent.
	Forwarded string
	// User is the user id the user header would have carried, empty when
	// none.
	User string
	// APIKey is the API key the API key header would have carried, empty
	// when none.
	APIKey string
	// Plan is the plan header (the identity section's plan_header) as
	// received, empty when absent. Like serve, a replay believes it only
	// when the request came through a trusted proxy.
	Plan string
}

// Errors of the log parsers. A *LineError wraps them.
var (
	// ErrSyntax is a line that is not of the format being read.
	ErrSyntax = errors.New("sluice/replay: line does not parse")
	// ErrNoRequest is a line whose request is not one serve would decide:
	// "-" (a connection closed before a request), a malformed request
	// line or a request target net/http refuses.
	ErrNoRequest = errors.New("sluice/replay: no request to decide")
	// ErrTime is a line whose time does not parse.
	ErrTime = errors.New("sluice/replay: bad time")
)

// fieldError is a parse error naming the field at fault.
func fieldError(kind error, field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", kind, field, fmt.Sprintf(format, args...))
}

// splitRequest reads a request line, "GET /path?q HTTP/1.1", into the
// method and the path as net/http would read it.
func splitRequest(line string) (method, path string, err error) {
	if line == "" || line == "-" {
		return "", "", fieldError(ErrNoRequest, "request", "none logged (%q)", line)
	}
	method, rest, ok := strings.Cut(line, " ")
	if !ok || !isToken(method) {
		return "", "", fieldError(ErrNoRequest, "request", "want METHOD TARGET [PROTO], got %q", clip(line))
	}
	target, proto, _ := strings.Cut(rest, " ")
	if proto != "" && !strings.HasPrefix(proto, "HTTP/") {
		return "", "", fieldError(ErrNoRequest, "request", "want METHOD TARGET [PROTO], got %q", clip(line))
	}
	path, err = targetPath(target)
	if err != nil {
		return "", "", err
	}
	return method, path, nil
}

// targetPath returns the path net/http's server would put in
// Request.URL.Path for a request target.
func targetPath(target string) (string, error) {
	if target == "" {
		return "", fieldError(ErrNoRequest, "request", "empty target")
	}
	if target[0] == '/' && strings.IndexByte(target, '%') < 0 {
		// The common case, as url.ParseRequestURI reads it: the path
		// ends at the query; nothing to decode.
		if i := strings.IndexByte(target, '?'); i >= 0 {
			target = target[:i]
		}
		if !validPathBytes(target) {
			return "", fieldError(ErrNoRequest, "request", "target %q has a control byte", clip(target))
		}
		return target, nil
	}
	if target == "*" {
		return "*", nil
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return "", fieldError(ErrNoRequest, "request", "target %q: %v", clip(target), errors.Unwrap(err))
	}
	if u.Path == "" {
		return "", fieldError(ErrNoRequest, "request", "target %q has no path", clip(target))
	}
	return u.Path, nil
}

// validPathBytes reports whether s holds no byte url.ParseRequestURI
// refuses in a path (controls and space).
func validPathBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// isToken reports whether s is an RFC 9110 token, as a method must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// dash returns s, or "" for a log's "-" (absent).
func dash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

// checkPeer refuses a peer address serve could never have had: a host
// name (Apache's HostnameLookups), a Unix socket's "unix:".
func checkPeer(field, peer string) error {
	if _, err := identity.ParsePeer(peer); err != nil {
		return fieldError(ErrSyntax, field, "want an IP address, got %q", clip(peer))
	}
	return nil
}
