package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/bolt"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/engine"
)

// backendFlags choose and configure the store under a command's engine:
// from the command line (addBackendFlags) or a configuration's store
// section (serve).
type backendFlags struct {
	name       string            // --backend: memory (the default), pebble or bolt
	dir        string            // --dir: a durable backend's state directory
	durability engine.Durability // --durability, when durable is set
	durable    bool              // a durability was asked for; otherwise the backend's default
	// fakeClock reports that a FakeClock drives the engine, so the store
	// must not sweep by the wall clock (set by the command, not a flag).
	fakeClock bool
}

// addBackendFlags registers --backend, --dir and --durability on fs and
// returns where their values land.
func addBackendFlags(fs *flag.FlagSet) *backendFlags {
	f := &backendFlags{}
	fs.StringVar(&f.name, "backend", "memory", "the `store`: memory, pebble or bolt")
	fs.StringVar(&f.dir, "dir", "", "a durable backend's state `directory` (required for pebble and bolt)")
	fs.Func("durability", "a durable backend's `promise`: sync (every decision on disk before it is printed) or interval (flushed every 50ms; the default)", func(s string) error {
		d, err := engine.ParseDurability(s)
		if err != nil {
			return errors.New("want sync or interval")
		}
		f.durability, f.durable = d, true
		return nil
	})
	return f
}

// usageError is a mistake in the command line, reported with exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// openBackend opens the store f describes and returns it with the engine
// options it needs. A *usageError reports a flag that names no store this
// build can open.
func openBackend(f backendFlags) (backend.Backend, engine.Options, error) {
	var opts engine.Options
	if f.durable {
		opts.Durability = f.durability
	}
	// A fake clock's times mean nothing to a sweeper reading the wall clock.
	sweep := time.Duration(0)
	if f.fakeClock {
		sweep = -1
	}
	switch f.name {
	case "memory":
		if f.dir != "" {
			return nil, opts, usagef("--dir: the memory backend keeps nothing on disk")
		}
		if f.durable {
			return nil, opts, usagef("--durability: the memory backend is not durable")
		}
		return memory.New(&memory.Options{SweepInterval: sweep}), opts, nil
	case "pebble", "bolt":
		if f.dir == "" {
			return nil, opts, usagef("--dir: required with --backend %s", f.name)
		}
		var (
			b   backend.Backend
			err error
		)
		if f.name == "pebble" {
			b, err = pebble.Open(f.dir, &pebble.Options{SweepInterval: sweep})
		} else {
			b, err = bolt.Open(f.dir, &bolt.Options{SweepInterval: sweep})
		}
		if err != nil {
			return nil, opts, err
		}
		return b, opts, nil
	default:
		return nil, opts, usagef("--backend %s: unknown backend (want memory, pebble or bolt)", f.name)
	}
}
