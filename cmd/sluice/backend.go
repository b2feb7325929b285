package main

import (
	"flag"
	"fmt"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/memory"
)

// backendFlags choose and configure the store under a command's engine.
type backendFlags struct {
	name       string // --backend: memory (the default), pebble or bolt
	dir        string // --dir: a durable backend's state directory
	durability string // --durability: sync or interval; empty means the backend's default
	// fakeClock reports that a FakeClock drives the engine, so the store
	// must not sweep by the wall clock (set by the command, not a flag).
	fakeClock bool
}

// addBackendFlags registers --backend, --dir and --durability on fs and
// returns where their values land.
func addBackendFlags(fs *flag.FlagSet) *backendFlags {
	f := &backendFlags{}
	fs.StringVar(&f.name, "backend", "memory", "the `store`: memory (pebble and bolt are not in this build yet)")
	fs.StringVar(&f.dir, "dir", "", "a durable backend's state `directory`")
	fs.StringVar(&f.durability, "durability", "", "a durable backend's `promise`: sync or interval")
	return f
}

// usageError is a mistake in the command line, reported with exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// sweeper is implemented by a store that removes expired keys on demand
// (the memory backend).
type sweeper interface {
	// Sweep removes keys expired at now, examining at most budget keys,
	// and returns how many it removed.
	Sweep(now int64, budget int) int
}

// openBackend opens the store f describes. A *usageError reports a flag that
// names no store this build can open.
func openBackend(f backendFlags) (backend.Backend, error) {
	switch f.durability {
	case "", "sync", "interval":
	default:
		return nil, usagef("--durability %s: want sync or interval", f.durability)
	}
	switch f.name {
	case "memory":
		if f.dir != "" {
			return nil, usagef("--dir: the memory backend keeps nothing on disk")
		}
		if f.durability != "" {
			return nil, usagef("--durability: the memory backend is not durable")
		}
		opts := &memory.Options{}
		if f.fakeClock {
			opts.SweepInterval = -1 // the wall clock means nothing to a fake one
		}
		return memory.New(opts), nil
	case "pebble", "bolt":
		return nil, usagef("--backend %s: not available in this build", f.name)
	default:
		return nil, usagef("--backend %s: unknown backend (want memory, pebble or bolt)", f.name)
	}
}
