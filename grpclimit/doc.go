// Package grpclimit puts sluice in front of a gRPC server: New returns a
// Limiter, whose UnaryServerInterceptor and StreamServerInterceptor limit
// its calls under the same rules, registry, engine, metrics and identity
// as package httplimit's middleware, and whose Limit method makes it a
// go-grpc-middleware v2 ratelimit.Limiter.
//
//	lim, err := grpclimit.New(grpclimit.Config{Engine: eng, Registry: reg})
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()),
//	)
//
// A rule's path_prefix is matched against the call's full method name,
// "/pkg.Service/Method"; only rules of method "*" cover gRPC calls. A
// denied call ends with codes.ResourceExhausted carrying a
// google.rpc.RetryInfo with the exact wait, and every limited call's
// response header metadata carries the IETF ratelimit-policy and
// ratelimit fields (with x-ratelimit-* and, for a denial, retry-after).
// New documents it all.
//
// The caller's key comes from package identity, the one home of caller
// identity: the user id or API key from the request metadata (x-user-id
// and x-api-key by default) or from an IdentityFunc fed by verified
// credentials, the peer's IP address (the client named by x-forwarded-for
// when the peer is a trusted proxy), or one key for everyone.
//
// The decision is sluice.Door's, the one every door makes: the
// interceptors read the call for it (full method name, :authority, plan,
// and the caller's key and cost under each rule) and turn its
// sluice.Outcome into metadata and a status.
//
// The package imports no YAML, file watching or metrics library. A Limiter
// is safe for concurrent use.
package grpclimit
