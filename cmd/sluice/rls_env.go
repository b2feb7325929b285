package main

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
)

// rlsEnv is what `sluice rls` reads of envoyproxy/ratelimit's environment,
// so that a deployment's env block can stay as it is. Flags given on the
// command line go over it.
type rlsEnv struct {
	config      string    // RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY
	grpc        string    // GRPC_HOST:GRPC_PORT
	shadowMode  bool      // SHADOW_MODE
	quotaMode   bool      // QUOTA_MODE
	headers     bool      // LIMIT_RESPONSE_HEADERS_ENABLED
	merge       bool      // MERGE_DOMAIN_CONFIG
	metadata    bool      // RESPONSE_DYNAMIC_METADATA
	headerNames [3]string // LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER
	notes       []string  // settings read that change nothing here, said at start
}

// readRLSEnv reads envoyproxy/ratelimit's settings from getenv. A setting
// Sluice cannot honour, and that would change the answers, is an error
// naming it and what to do instead; one that changes nothing here is a
// note. README's migration table lists them all.
func readRLSEnv(getenv func(string) string) (rlsEnv, error) {
	var e rlsEnv
	isTrue := func(name string) (bool, error) {
		v := getenv(name)
		if v == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("%s=%s: want true or false", name, v)
		}
		return b, nil
	}
	if root := getenv("RUNTIME_ROOT"); root != "" {
		app := getenv("RUNTIME_APPDIRECTORY")
		if app == "" {
			app = "config"
		}
		e.config = filepath.Join(root, getenv("RUNTIME_SUBDIRECTORY"), app)
	}
	if host, port := getenv("GRPC_HOST"), getenv("GRPC_PORT"); host != "" || port != "" {
		if port == "" {
			port = "8081"
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return e, fmt.Errorf("GRPC_PORT=%s: want a port number", port)
		}
		e.grpc = net.JoinHostPort(host, port)
	}
	var err error
	if e.shadowMode, err = isTrue("SHADOW_MODE"); err != nil {
		return e, err
	}
	if e.quotaMode, err = isTrue("QUOTA_MODE"); err != nil {
		return e, err
	}
	if e.headers, err = isTrue("LIMIT_RESPONSE_HEADERS_ENABLED"); err != nil {
		return e, err
	}
	for i, name := range []string{"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"} {
		e.headerNames[i] = getenv(name)
	}
	// Settings whose behaviour Sluice does not have yet: refused, not
	// silently different.
	if t := getenv("CONFIG_TYPE"); t != "" && !strings.EqualFold(t, "FILE") {
		return e, fmt.Errorf("CONFIG_TYPE=%s: sluice rls reads its configuration from files only (--config, or RUNTIME_ROOT); configuration from an xDS control plane is not supported yet", t)
	}
	if e.merge, err = isTrue("MERGE_DOMAIN_CONFIG"); err != nil {
		return e, err
	}
	if e.metadata, err = isTrue("RESPONSE_DYNAMIC_METADATA"); err != nil {
		return e, err
	}
	for _, name := range []string{"REDIS_PERSECOND"} {
		on, err := isTrue(name)
		if err != nil {
			return e, err
		}
		if on {
			return e, fmt.Errorf("%s=true: not supported by sluice rls yet (see the migration table in the README)", name)
		}
	}
	if t := getenv("BACKEND_TYPE"); t != "" && !strings.EqualFold(t, "redis") {
		return e, fmt.Errorf("BACKEND_TYPE=%s: sluice rls keeps its budgets in memory, Pebble, bbolt or Redis (--backend, or --store)", t)
	}
	if v := getenv("NEAR_LIMIT_RATIO"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r != 0.8 {
			return e, fmt.Errorf("NEAR_LIMIT_RATIO=%s: sluice rls counts near-limit hits past 0.8 of a limit only", v)
		}
	}
	// Read, and the same here whatever they say.
	if on, err := isTrue("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"); err != nil {
		return e, err
	} else if !on && getenv("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") != "" {
		e.notes = append(e.notes, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false: a refused request spends nothing here, as with true")
	}
	if getenv("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED") != "" {
		e.notes = append(e.notes, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: sluice rls serves only once a configuration has loaded, always")
	}
	if getenv("REDIS_URL") != "" {
		e.notes = append(e.notes, "REDIS_URL is not read: give the store with --backend redis --redis-addr, or --store FILE")
	}
	for _, name := range []string{"USE_STATSD", "USE_PROMETHEUS", "LOCAL_CACHE_SIZE_IN_BYTES", "CACHE_KEY_PREFIX"} {
		if getenv(name) != "" {
			e.notes = append(e.notes, name+" is not read: see the migration table in the README for the equivalent")
		}
	}
	return e, nil
}
