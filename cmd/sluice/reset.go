package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
)

const resetUsage = `Usage: sluice reset --rule NAME --key KEY [--config FILE]
       [--backend pebble|bolt --dir DIR | --backend redis --redis-addr HOST:PORT[,...] --redis-prefix P --redis-timeout D --redis-breaker B]

Reset unblocks one caller: it forgets the caller's record under the rule,
so that its next request is decided as its first. KEY is the caller as an
operator writes it: user:ID, key:API_KEY (the raw key, hashed here as the
gateway hashes it), keyhash:HEX (a key's hash as inspect shows it),
ip:ADDRESS (an IPv6 address stands for its prefix) or global.

The store is the configuration's store section (--config) or the flags
(which override it). --config also checks that the rule exists and reads
the identity section's ipv6_prefix.

Stop the gateway using a Pebble or bbolt directory first: the store is
locked while it runs. A running gateway is reset on its admin listener
instead (POST /v1/reset), and so is one on the memory store, whose records
live only in its process. A Redis store is reset while the fleet runs; a
gateway that had answered the caller's denial from its cache learns of the
reset by Redis Pub/Sub.

Reset says when it removed the caller's record. Exit status: 0 when it
did, 1 when the caller had no record under the rule (nothing was reset:
see sluice inspect for the keys the store holds) or the store cannot be
opened or written, 2 for a usage error.

Flags:
`

// runReset is the reset command.
func runReset(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("reset", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ruleName := fs.String("rule", "", "the `name` of the rule (its counters' namespace, or with --config the rule whose counter to reset); required")
	keyText := fs.String("key", "", "the caller `key`: user:ID, key:API_KEY, keyhash:HEX, ip:ADDRESS or global; required")
	configPath := fs.String("config", "", "a gateway configuration `file` to read the store, the rules and the identity section from")
	bflags := addBackendFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), resetUsage)
		fs.PrintDefaults()
	}
	if status, done := parseArgs(fs, args, stdout); done {
		return status
	}
	fail := failer(stderr, "sluice reset")
	switch {
	case fs.NArg() > 0:
		return fail(2, "unexpected argument %q", fs.Arg(0))
	case *ruleName == "":
		return fail(2, "--rule is required")
	case *keyText == "":
		return fail(2, "--key is required")
	}
	idCfg := identity.Config{}
	bf := *bflags
	namespace := *ruleName
	if *configPath != "" {
		cfg, err := config.Load(*configPath)
		if err != nil {
			return fail(2, "%v", err)
		}
		rs, err := cfg.Ruleset()
		if err != nil {
			return fail(2, "%s: %v", *configPath, err)
		}
		if rs.Rule(*ruleName) == nil {
			var names []string
			for _, c := range rs.Rules() {
				names = append(names, c.Name())
			}
			if d := rs.Default(); d != nil {
				names = append(names, d.Name())
			}
			return fail(2, "--rule %s: %s has no such rule (it has %v)", *ruleName, *configPath, names)
		}
		namespace = rs.Rule(*ruleName).Limit().Namespace // its counter, when it shares one
		idCfg = cfg.Identity
		fileStore := storeFlags(cfg.Store)
		fileStore.from = *configPath
		bf = bflags.over(fileStore)
	}
	id, err := identity.New(idCfg)
	if err != nil {
		return fail(2, "%s: identity: %v", *configPath, err)
	}
	key, err := id.ParseKey(*keyText)
	if err != nil {
		return fail(2, "--key: %v", err)
	}
	if bf.name == config.BackendMemory {
		return fail(2, "the memory store keeps its records in the gateway's process only, so there is nothing here to reset: "+
			"reset the caller on the running gateway's admin listener (POST /v1/reset with rule and key), or name a durable store (--backend pebble|bolt --dir DIR, or --config)")
	}
	if bf.name != config.BackendRedis && bf.dir != "" {
		if err := checkStoreDir(bf.name, bf.dir); err != nil {
			return fail(1, "%v", err)
		}
	}
	b, opts, err := openBackend(bf)
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			return fail(2, "%v", err)
		}
		if errors.Is(err, backend.ErrLocked) {
			return fail(1, "opening the %s store: %v (stop the gateway using %s, or reset on its admin listener: POST /v1/reset)", bf.name, err, bf.dir)
		}
		return fail(1, "opening the %s store: %v", bf.name, err)
	}
	eng, err := engine.New(b, &opts)
	if err != nil {
		b.Close()
		return fail(1, "starting the engine: %v", err)
	}
	l := engine.Limit{Namespace: namespace} // Reset and Record need only the namespace
	removed, rerr := resetRecord(context.Background(), eng, l, key)
	if cerr := eng.Close(); rerr == nil && cerr != nil {
		rerr = fmt.Errorf("closing the store: %w", cerr)
	}
	if rerr != nil {
		return fail(1, "%v", rerr)
	}
	shown := identity.ShowKey(key)
	if !removed {
		return fail(1, "nothing to reset: rule %s has no record of %s (it has spent nothing under the rule, or it is counted under another key or rule: sluice inspect lists the records)", *ruleName, shown)
	}
	fmt.Fprintf(stdout, "reset %s under rule %s (its record is gone)\n", shown, *ruleName)
	return 0
}
