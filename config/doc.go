// Package config reads a gateway's YAML configuration file and keeps a
// sluice.Registry in step with it.
//
// Parse and Load read the file (store, identity, on_store_error, match,
// rules, default, overrides, response, exempt) into a Config holding every
// default filled in; every error is an *Error naming the file, the line and
// the key at fault. Parse reads only the bytes it is given, so what it
// returns depends on them alone; Load reads the file, parses it, then reads
// what it names (Config.ReadReferences: a password file or variable, a CA
// file). The identity section is an identity.Config as it stands. The
// store section names the backend (memory, pebble, bolt or redis) and its
// settings; a redis section's password may come from a file or an
// environment variable, and is left out of Store.String. A rule (or the
// default) with "shadow: true" is a sluice.Rule with Shadow set: decided
// and counted, but never denying. A rule's plan and the overrides section
// (callers given their own limit, written as identity.Identifier.ParseKey
// reads them: see overrides.go) are compiled into the ruleset with the
// rules, so they reload with them. Watch reloads the file into a registry
// when it changes (fsnotify on its directory) or on SIGHUP, rejecting an
// invalid file whole.
//
// The package is apart from the root so that a program that builds its
// rules in Go imports no YAML or fsnotify. A Config is a plain value; a
// Watcher is safe for concurrent use.
package config
