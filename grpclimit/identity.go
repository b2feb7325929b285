package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/identity"
)

// IdentityFunc is the embedding program's hook for the caller's identity,
// read from credentials something has verified: the client certificate of
// the peer's TLS connection (peer.FromContext(ctx).AuthInfo, a
// credentials.TLSInfo), or what an authenticating interceptor earlier in
// the chain put in ctx. fullMethod is the call's "/pkg.Service/Method".
//
// It is called only for rules scoped user, api_key or attr:NAME
// (identity.Caller.With sets the attributes); an anonymous result (empty
// fields) is counted by the peer's IP address. A returned error
// that carries a gRPC status (status.FromError: codes.Unauthenticated, say)
// ends the call with that status; one matching identity.ErrBadIdentity
// ends it with codes.InvalidArgument; any other is logged and ends it with
// codes.Internal, as does a panic (which is recovered). An IdentityFunc must
// be safe for concurrent use.
type IdentityFunc func(ctx context.Context, fullMethod string) (identity.Caller, error)

// incoming reads a call's request metadata for package identity, which
// asks for field names in canonical HTTP form ("X-User-Id"): gRPC keeps
// them in lower case, so each name is lowered on the stack before the
// lookup. The metadata is read in place from ctx, one key at a time,
// without copying the whole of it.
type incoming struct{ ctx context.Context }

// Values implements identity.Header.
func (h incoming) Values(name string) []string {
	var buf [32]byte
	b := buf[:0]
	if len(name) > len(buf) {
		b = make([]byte, 0, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return metadata.ValueFromIncomingContext(h.ctx, string(b))
}

// callerKey returns the key the caller of a call is counted under by a
// rule of the given scope, as identity.Identifier.Key makes it: the user id
// or API key from the metadata (or from fn), the peer's address with the
// trusted-proxy rules for the forwarding metadata, or "global". A panic in
// fn is not recovered here.
func callerKey(ctx context.Context, id *identity.Identifier, fn IdentityFunc, method string, scope sluice.Scope) (string, error) {
	h := incoming{ctx}
	switch scope {
	case sluice.ScopeGlobal:
		return "global", nil
	case sluice.ScopeIP:
		a, err := peerAddr(ctx)
		if err != nil {
			return "", err
		}
		ip, err := id.ClientIP(a, h)
		if err != nil {
			return "", err
		}
		return id.IPKey(ip), nil
	}
	if scope.Param() != "" {
		return "", nil // the Door makes the key from the path it matched
	}
	var (
		who      identity.Caller
		supplied = fn != nil && scope.Header() == ""
	)
	if supplied {
		var err error
		if who, err = fn(ctx, method); err != nil {
			return "", &identityFuncError{err: err}
		}
	}
	// The peer's address is formatted only when the key needs it. With no
	// address, the Identifier answers a key that does not depend on the
	// peer (a user id, an API key, an error of the identity itself) or
	// ErrNoPeerAddr: only then is the peer needed, and the call made again
	// with it.
	k, err := keyFor(id, scope, who, supplied, "", h)
	if errors.Is(err, identity.ErrNoPeerAddr) {
		var remote string
		if remote, err = peerString(ctx); err != nil {
			return "", err
		}
		k, err = keyFor(id, scope, who, supplied, remote, h)
	}
	return k, err
}

// keyFor is id.KeyFor when the caller was supplied, id.Key otherwise.
func keyFor(id *identity.Identifier, scope sluice.Scope, who identity.Caller, supplied bool, remote string, h identity.Header) (string, error) {
	if supplied {
		return id.KeyFor(scope, who, remote, h)
	}
	return id.Key(scope, remote, h)
}

// identityFuncError is an error the IdentityFunc returned.
type identityFuncError struct{ err error }

func (e *identityFuncError) Error() string { return "sluice/grpclimit: identity: " + e.err.Error() }
func (e *identityFuncError) Unwrap() error { return e.err }

// peerAddr returns the call's peer IP address: IPv4-mapped IPv6 read as
// IPv4, no zone. A call without a TCP peer (a Unix socket, an in-memory
// listener) is an identity.ErrNoPeerAddr.
func peerAddr(ctx context.Context) (netip.Addr, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}, fmt.Errorf("sluice/grpclimit: peer: %w", identity.ErrNoPeerAddr)
	}
	if ta, ok := p.Addr.(*net.TCPAddr); ok {
		if a, ok := netip.AddrFromSlice(ta.IP); ok {
			return a.Unmap().WithZone(""), nil
		}
	}
	a, err := identity.ParsePeer(p.Addr.String())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("sluice/grpclimit: peer: %w", err)
	}
	return a, nil
}

// peerString returns the call's peer address as text, for the Identifier.
func peerString(ctx context.Context) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "", fmt.Errorf("sluice/grpclimit: peer: %w", identity.ErrNoPeerAddr)
	}
	return p.Addr.String(), nil
}

// key is the Door's Key: the key c's caller is counted under by rule
// (callerKey), and what Config.Cost says c spends under it. The Door
// contains a panic in the IdentityFunc or the Cost function.
func (l *Limiter) key(c call, rule *sluice.CompiledRule) (string, int64, error) {
	key, err := callerKey(c.ctx, l.id, l.identify, c.method, rule.Scope())
	if err != nil || l.cost == nil {
		return key, 0, err
	}
	return key, l.cost(c.ctx, c.method, rule), nil
}

// authority is the Door's Host: the call's :authority, which the Door
// reads only when a rule names a host.
func authority(c call) string {
	if a := metadata.ValueFromIncomingContext(c.ctx, ":authority"); len(a) > 0 {
		return a[0]
	}
	return ""
}
