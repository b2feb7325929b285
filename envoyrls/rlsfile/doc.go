// Package rlsfile reads envoyproxy/ratelimit's configuration files,
// unchanged, into the domains an envoyrls.Server answers under, and keeps
// a Server in step with them.
//
// ParseFile reads one YAML file, one domain: a domain and a tree of
// descriptors, each a key with an optional value (exact, or a pattern where
// each "*" matches any run of characters), an optional rate_limit (unit
// second, minute, hour, day, week, month or year, requests_per_unit,
// unit_multiplier, unlimited, name, replaces) and the flags shadow_mode,
// quota_mode, detailed_metric, value_to_metric and share_threshold;
// metadata is accepted and ignored. Sluice adds two optional fields to
// rate_limit: algorithm (one of algo.Names; fixed_window when absent, so a
// migrated file answers as it did) and burst (the capacity of a bucket
// algorithm). The file is read into envoyrls.Descriptor values and checked
// by envoyrls.NewDomain; every error is a *config.Error naming the file,
// the line and the field. A third addition, the top-level allow_empty:
// true, says that a file limits nothing on purpose (no descriptor, or only
// unlimited or shadow_mode ones): a Watcher refuses a reload that makes a
// file which limited limit nothing unless it says so, as a file cut short
// by a writer that is not atomic reads the same; a file that says so and
// has a descriptor that limits is refused.
//
// Load reads a file, or every *.yaml and *.yml file of a directory and its
// subdirectories, one domain each, into an envoyrls.Config; LoadWith
// merges the files of one domain as MERGE_DOMAIN_CONFIG does. Watch reloads
// them into a Server when they change (fsnotify on their directories) or on
// SIGHUP once they have stopped changing, rejecting a configuration that
// does not load whole.
//
// The package is apart from envoyrls so that a program that serves domains
// it builds in Go imports no YAML or fsnotify. A Watcher is safe for
// concurrent use.
package rlsfile
