// Package sluiceotel exports what the doors decide through OpenTelemetry:
// metrics per rule, and an event on the request's span per decision. Its
// *Observer is the sluice.Observer a door is given (httplimit.Config.Metrics,
// grpclimit.Config.Metrics), in place of or beside package metrics'
// Prometheus one.
//
// OpenTelemetry has no semantic convention for rate limiting. The names
// follow the nearest precedent, ASP.NET Core's rate-limiting middleware
// (meter Microsoft.AspNetCore.RateLimiting, whose names OpenTelemetry's
// semantic conventions list as stable for .NET): decisions are counted by
// aspnetcore.rate_limiting.requests, with the rule's name as
// aspnetcore.rate_limiting.policy and aspnetcore.rate_limiting.result
// "acquired" or "endpoint_limiter". What ASP.NET Core has no name for
// (cost spent, decision latency, store errors, decisions made locally,
// shadow rules' would-be denials, the span event) is named under
// sluice.rate_limiting. See Observer for the list.
//
// No attribute names a caller: a rule's name and a result are the only
// attributes of a metric, so their number is bounded by the configuration,
// and the span event carries the decision's figures but not the caller's
// key.
//
// It lives apart from the root package and the doors so that a program
// that does not use it imports no OpenTelemetry. Nothing is exported
// unless a program makes an Observer and gives it to a door.
package sluiceotel
