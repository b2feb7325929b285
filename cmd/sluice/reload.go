package main

import (
	"flag"
	"time"

	"github.com/sluice-go/sluice/config"
)

// addReloadSettleFlag registers --reload-settle, how long the
// configuration must stay unchanged before a change is put in force.
func addReloadSettleFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("reload-settle", config.DefaultSettle,
		"how long the configuration must stay unchanged (two reads this `duration` apart agree) before a change or a SIGHUP is put in force, so that a file still being written is not loaded half-way; replace files atomically all the same")
}
