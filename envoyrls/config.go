package envoyrls

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/internal/configerr"
	"github.com/sluice-go/sluice/internal/yamlnode"
)

// MaxFileSize bounds a configuration file Load reads: a bigger one is
// refused rather than parsed.
const MaxFileSize = 16 << 20

// maxDepth bounds how deeply descriptors nest; deeper is refused.
const maxDepth = 64

// ErrNoConfig is wrapped by Load's error for a directory holding no
// *.yaml or *.yml file.
var ErrNoConfig = errors.New("envoyrls: no configuration file")

// The units of rate_limit.unit, by their configuration names (matched
// without regard to case), and their lengths.
var units = map[string]struct {
	unit rlspb.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	"second": {rlspb.RateLimitResponse_RateLimit_SECOND, time.Second},
	"minute": {rlspb.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	"hour":   {rlspb.RateLimitResponse_RateLimit_HOUR, time.Hour},
	"day":    {rlspb.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	"week":   {rlspb.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	"month":  {rlspb.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	"year":   {rlspb.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// unitLength returns the length of a protocol unit, or 0 for an unknown one.
func unitLength(u rlspb.RateLimitResponse_RateLimit_Unit) time.Duration {
	for _, x := range units {
		if x.unit == u {
			return x.d
		}
	}
	return 0
}

// Limit is one rate_limit of a configuration: where it sits, how much it
// allows, and how it answers. It is immutable once loaded.
type Limit struct {
	// Domain is the domain of the file the limit comes from.
	Domain string
	// Path is the limit's place in the configuration, as
	// envoyproxy/ratelimit names it in its statistics: the domain and each
	// level's key, or key_value where the level gives a value, joined by
	// dots ("messaging.message_type_marketing.to_number"). It is the
	// namespace of the limit's records, so two limits never share one.
	Path string
	// Name is rate_limit.name, the name replaces refers to; may be empty.
	Name string
	// Replaces lists the names of the limits this one replaces.
	Replaces []string
	// Unlimited reports rate_limit.unlimited: always OK, nothing counted
	// against a budget.
	Unlimited bool
	// Shadow reports shadow_mode: decided and counted, never denying.
	Shadow bool
	// Quota reports quota_mode: over its limit, it denies the request only
	// when every quota_mode descriptor of the request is over its own.
	Quota bool
	// DetailedMetric reports detailed_metric: metrics by the request's
	// values rather than by the configuration's path.
	DetailedMetric bool
	// RequestsPerUnit is rate_limit.requests_per_unit. Zero refuses every
	// request.
	RequestsPerUnit uint32
	// Unit is rate_limit.unit; UnitMultiplier is rate_limit.unit_multiplier
	// (1 when absent). The window is their product.
	Unit           rlspb.RateLimitResponse_RateLimit_Unit
	UnitMultiplier uint32
	// Window is the length of Unit times UnitMultiplier (a month is 30
	// days, a year 365).
	Window time.Duration
	// Algorithm is rate_limit.algorithm, fixed_window when absent; Burst
	// is rate_limit.burst, zero when absent.
	Algorithm string
	Burst     int64

	line   int          // of the rate_limit key, for errors
	limit  engine.Limit // nil Algorithm when unlimited or RequestsPerUnit is 0
	proto  *rlspb.RateLimitResponse_RateLimit
	policy string                      // the RateLimit-Policy item name: Name, else Path
	metric string                      // the metric label: Path without the domain
	fields atomic.Pointer[limitFields] // headerFields' cache
}

// EngineLimit returns the engine limit that enforces l: its namespace is
// l.Path, its algorithm l.Algorithm with l's rate. It has no algorithm when
// l is unlimited or allows nothing (requests_per_unit 0).
func (l *Limit) EngineLimit() engine.Limit { return l.limit }

// Capacity returns what one request is measured against: the burst where
// one is set, else RequestsPerUnit.
func (l *Limit) Capacity() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return int64(l.RequestsPerUnit)
}

// node is one descriptor of the configuration tree, or a domain's root.
type node struct {
	key, value                    string
	parts                         []string // value split on "*" when it is a pattern
	limit                         *Limit
	valueToMetric, shareThreshold bool

	exact    map[entry]*node    // children by key and value; a key-only child under an empty value
	patterns map[string][]*node // children whose value is a pattern, by key, in file order
}

type entry struct{ key, value string }

// Domain is the configuration of one domain: one file's descriptors.
type Domain struct {
	// Name is the domain.
	Name string
	// File is the file it was read from.
	File string
	root *node
	all  []*Limit
}

// Limits returns every limit of the domain, in file order.
func (d *Domain) Limits() []*Limit { return slices.Clone(d.all) }

// Config is a set of domains, as Load reads from a directory. It is
// immutable and safe for concurrent use.
type Config struct {
	domains map[string]*Domain
	files   []string
}

// NewConfig gathers domains into a Config. Two of the same name are an
// error naming both files (envoyproxy/ratelimit refuses them too).
func NewConfig(domains ...*Domain) (*Config, error) {
	c := &Config{domains: make(map[string]*Domain, len(domains))}
	for _, d := range domains {
		if o, dup := c.domains[d.Name]; dup {
			return nil, &configerr.Error{File: d.File, Field: "domain", Reason: fmt.Sprintf("duplicate domain %q: %s has it too", d.Name, o.File)}
		}
		c.domains[d.Name] = d
		c.files = append(c.files, d.File)
	}
	return c, nil
}

// Domain returns the named domain, or nil. A nil Config has no domains.
func (c *Config) Domain(name string) *Domain {
	if c == nil {
		return nil
	}
	return c.domains[name]
}

// Domains returns the domains' names, sorted.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	names := make([]string, 0, len(c.domains))
	for n := range c.domains {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Files returns the files the configuration was read from.
func (c *Config) Files() []string {
	if c == nil {
		return nil
	}
	return slices.Clone(c.files)
}

// Load reads the configuration at path: a file, or every regular *.yaml
// and *.yml file of a directory (names starting with "." are skipped, as
// are subdirectories; symbolic links are followed), one domain each.
// Errors are *configerr.Error values naming the file, the line and the field
// at fault, or I/O errors.
func Load(path string) (*Config, error) {
	c, _, err := load(path, LoadOptions{})
	return c, err
}

// LoadOptions change how Load reads a configuration.
type LoadOptions struct {
	// MergeDomains reads the files of one domain as one, as
	// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does: their top-level
	// descriptors together, one that two files both have refused. Without
	// it two files of one domain are an error.
	MergeDomains bool
}

// LoadWith is Load with options.
func LoadWith(path string, o LoadOptions) (*Config, error) {
	c, _, err := load(path, o)
	return c, err
}

// load is Load that also returns a digest of the file names and contents.
func load(path string, o LoadOptions) (*Config, uint64, error) {
	files, digest, err := readFiles(path)
	if err != nil {
		return nil, 0, err
	}
	c, err := parseFiles(files, o)
	return c, digest, err
}

// file is one configuration file as read: its name and its bytes.
type file struct {
	name string
	data []byte
}

// readFiles reads the files Load reads at path, in order, and returns them
// with a digest of their names and contents. When one cannot be read, the
// error is that of an earlier file that does not parse, if any, as reading
// and parsing them one by one would report it.
func readFiles(path string) ([]file, uint64, error) {
	names, err := configFiles(path)
	if err != nil {
		return nil, 0, err
	}
	files := make([]file, 0, len(names))
	h := xxhash.New()
	for _, name := range names {
		data, err := readFile(name)
		if err != nil {
			for _, f := range files {
				if _, perr := ParseFile(f.name, f.data); perr != nil {
					return nil, 0, perr
				}
			}
			return nil, 0, err
		}
		h.WriteString(name)
		h.Write([]byte{0})
		h.Write(data)
		h.Write([]byte{0})
		files = append(files, file{name, data})
	}
	return files, h.Sum64(), nil
}

// parseFiles parses files, one domain each, into a Config as o says.
func parseFiles(files []file, o LoadOptions) (*Config, error) {
	domains := make([]*Domain, 0, len(files))
	for _, f := range files {
		d, err := ParseFile(f.name, f.data)
		if err != nil {
			return nil, err
		}
		domains = append(domains, d)
	}
	return NewConfigWith(o, domains...)
}

// NewConfigWith is NewConfig reading the domains as o says: with
// o.MergeDomains, the domains of one name are merged, in order, into the
// first of them (which it changes), as Load merges the files of one domain.
func NewConfigWith(o LoadOptions, domains ...*Domain) (*Config, error) {
	if o.MergeDomains {
		var err error
		if domains, err = mergeDomains(domains); err != nil {
			return nil, err
		}
	}
	return NewConfig(domains...)
}

// mergeDomains merges the domains of one name, in file order, into the
// first of them.
func mergeDomains(ds []*Domain) ([]*Domain, error) {
	byName := map[string]*Domain{}
	out := ds[:0:0]
	for _, d := range ds {
		first, ok := byName[d.Name]
		if !ok {
			byName[d.Name] = d
			out = append(out, d)
			continue
		}
		if err := first.merge(d); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// merge adds o's top-level descriptors to d. A descriptor both have (the
// same key and value) is an error naming both files, as
// envoyproxy/ratelimit's "duplicate descriptor composite key".
func (d *Domain) merge(o *Domain) error {
	for e, n := range o.root.exact {
		if _, dup := d.root.exact[e]; dup {
			return &configerr.Error{File: o.File, Field: "descriptors", Reason: fmt.Sprintf("duplicate descriptor %s=%s of domain %q: %s has it too (MERGE_DOMAIN_CONFIG merges the files' descriptors, not their children)", e.key, e.value, d.Name, d.File)}
		}
		d.root.exact[e] = n
	}
	for key, ns := range o.root.patterns {
		for _, n := range ns {
			if slices.ContainsFunc(d.root.patterns[key], func(m *node) bool { return m.value == n.value }) {
				return &configerr.Error{File: o.File, Field: "descriptors", Reason: fmt.Sprintf("duplicate descriptor %s=%s of domain %q: %s has it too", key, n.value, d.Name, d.File)}
			}
			d.root.patterns[key] = append(d.root.patterns[key], n)
		}
	}
	d.all = append(d.all, o.all...)
	d.File += "," + o.File
	return nil
}

// configFiles lists the files Load reads at path, sorted: the file, or
// every *.yaml and *.yml file under the directory, in its subdirectories
// too, as envoyproxy/ratelimit walks its runtime directory. Names starting
// with a dot are skipped, directories included (a Kubernetes ConfigMap's
// ..data and timestamped directories: its files are linked from the top).
func configFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	var files []string
	err = filepath.WalkDir(path, func(f string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := e.Name()
		if f != path && strings.HasPrefix(name, ".") {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			return nil
		}
		if st, err := os.Stat(f); err != nil || !st.Mode().IsRegular() {
			return nil // a dangling link, a directory named *.yaml
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: %s holds no *.yaml or *.yml file", ErrNoConfig, path)
	}
	slices.Sort(files)
	return files, nil
}

// Files returns the files Load reads at path, sorted (see Load).
func Files(path string) ([]string, error) { return configFiles(path) }

// configDirs lists path, when a directory, and its subdirectories but
// those starting with a dot: what a watcher watches.
func configDirs(path string) []string {
	var dirs []string
	filepath.WalkDir(path, func(f string, e fs.DirEntry, err error) error {
		switch {
		case err != nil || !e.IsDir():
			return nil
		case f != path && strings.HasPrefix(e.Name(), "."):
			return filepath.SkipDir
		}
		dirs = append(dirs, f)
		return nil
	})
	return dirs
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, &configerr.Error{File: name, Reason: fmt.Sprintf("larger than %d bytes", MaxFileSize)}
	}
	return data, nil
}

// parser reads one file.
type parser struct {
	yamlnode.Reader
	domain string
	all    []*Limit
}

// ParseFile reads one configuration file, named name in errors. Keys
// unknown to both envoyproxy/ratelimit and Sluice are refused, as
// envoyproxy/ratelimit refuses them.
func ParseFile(name string, data []byte) (*Domain, error) {
	p := &parser{Reader: yamlnode.Reader{File: name, Aliases: true, KeyError: "config error, key is not of type string: %s"}}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, p.SyntaxError(err, data)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, p.Errorf(0, "domain", "required: the file is empty")
	}
	root := yamlnode.Resolve(doc.Content[0])
	d := &Domain{File: name, root: newNode("", "")}
	var descs *yaml.Node
	err := p.Fields(root, "", func(key string, v *yaml.Node, field string) (bool, error) {
		switch key {
		case "domain":
			s, err := p.Str(v, field)
			d.Name = s
			return true, err
		case "descriptors":
			descs = v
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	if d.Name == "" {
		return nil, p.Errorf(root.Line, "domain", "required: a file cannot have an empty domain")
	}
	p.domain = d.Name
	if descs != nil {
		if err := p.descriptors(descs, "descriptors", d.Name, d.root, 1); err != nil {
			return nil, err
		}
	}
	d.all = p.all
	return d, nil
}

func newNode(key, value string) *node {
	return &node{key: key, value: value, exact: map[entry]*node{}, patterns: map[string][]*node{}}
}

// descriptors reads the list n of descriptors under parent, whose path is
// at (the domain, then each level's key or key_value).
func (p *parser) descriptors(n *yaml.Node, field, at string, parent *node, depth int) error {
	n = yamlnode.Resolve(n)
	if n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return p.Errorf(n.Line, field, "want a list of descriptors, got %s", yamlnode.Describe(n))
	}
	if depth > maxDepth {
		return p.Errorf(n.Line, field, "descriptors nest deeper than %d levels", maxDepth)
	}
	for i, item := range n.Content {
		if err := p.descriptor(yamlnode.Resolve(item), fmt.Sprintf("%s[%d]", field, i), at, parent, depth); err != nil {
			return err
		}
	}
	return nil
}

// rawLimit is a rate_limit block as read, before it is checked.
type rawLimit struct {
	line                int
	field               string
	unit, unitField     string
	unitLine            int
	rpu, mult           uint64
	hasRPU, hasMult     bool
	unlimited           bool
	name                string
	replaces            []string
	replacesLines       []int
	algorithm           string
	algorithmLine       int
	burst               int64
	burstLine, multLine int
	rpuLine             int
}

func (p *parser) descriptor(n *yaml.Node, field, at string, parent *node, depth int) error {
	if n.Kind != yaml.MappingNode {
		return p.Errorf(n.Line, field, "config error, yaml file contains list of type other than map: got %s", yamlnode.Describe(n))
	}
	var (
		key, value                          string
		rl                                  *rawLimit
		shadow, quota, detailed, v2m, share bool
		children                            *yaml.Node
		keyLine                             = n.Line
	)
	err := p.Fields(n, field, func(k string, v *yaml.Node, f string) (bool, error) {
		var err error
		switch k {
		case "key":
			key, err = p.Str(v, f)
			keyLine = v.Line
		case "value":
			value, err = p.Str(v, f)
		case "rate_limit":
			rl, err = p.rateLimit(v, f)
		case "descriptors":
			children = v
		case "shadow_mode":
			shadow, err = p.Bool(v, f)
		case "quota_mode":
			quota, err = p.Bool(v, f)
		case "detailed_metric":
			detailed, err = p.Bool(v, f)
		case "value_to_metric":
			v2m, err = p.Bool(v, f)
		case "share_threshold":
			share, err = p.Bool(v, f)
		case "metadata":
			if v.Kind != yaml.MappingNode && v.Tag != "!!null" {
				err = p.Errorf(v.Line, f, "want a mapping, got %s", yamlnode.Describe(v))
			}
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return err
	}
	if key == "" {
		return p.Errorf(keyLine, configerr.Join(field, "key"), "required: descriptor has empty key")
	}
	final := key
	if value != "" {
		final += "_" + value
	}
	path := at + "." + final
	child := newNode(key, value)
	child.valueToMetric, child.shareThreshold = v2m, share
	pattern := strings.Contains(value, "*")
	if share && !pattern {
		return p.Errorf(n.Line, configerr.Join(field, "share_threshold"), "share_threshold can only be used with wildcard values (containing '*'), but found key %q", final)
	}
	if pattern {
		child.parts = strings.Split(value, "*")
		for _, o := range parent.patterns[key] {
			if o.value == value {
				return p.Errorf(keyLine, field, "duplicate descriptor composite key %q", path)
			}
		}
		parent.patterns[key] = append(parent.patterns[key], child)
	} else {
		e := entry{key, value}
		if _, dup := parent.exact[e]; dup {
			return p.Errorf(keyLine, field, "duplicate descriptor composite key %q", path)
		}
		parent.exact[e] = child
	}
	if rl != nil {
		l, err := p.limit(rl, path)
		if err != nil {
			return err
		}
		l.Shadow, l.Quota, l.DetailedMetric = shadow, quota, detailed
		child.limit = l
		p.all = append(p.all, l)
	}
	if children != nil {
		if err := p.descriptors(children, configerr.Join(field, "descriptors"), path, child, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) rateLimit(n *yaml.Node, field string) (*rawLimit, error) {
	rl := &rawLimit{line: n.Line, field: field}
	err := p.Fields(n, field, func(k string, v *yaml.Node, f string) (bool, error) {
		var err error
		switch k {
		case "unit":
			rl.unit, err = p.Str(v, f)
			rl.unitField, rl.unitLine = f, v.Line
		case "requests_per_unit":
			// The proto allows a uint32; Sluice's limits stop at
			// algo.MaxLimit, which the error should say at once.
			rl.rpu, err = p.Uint(v, f, algo.MaxLimit)
			rl.hasRPU, rl.rpuLine = true, v.Line
		case "unit_multiplier":
			rl.mult, err = p.Uint(v, f, math.MaxUint32)
			rl.hasMult, rl.multLine = true, v.Line
		case "unlimited":
			rl.unlimited, err = p.Bool(v, f)
		case "name":
			rl.name, err = p.Str(v, f)
		case "replaces":
			err = p.replaces(v, f, rl)
		case "algorithm":
			rl.algorithm, err = p.Str(v, f)
			rl.algorithmLine = v.Line
		case "burst":
			var b uint64
			b, err = p.Uint(v, f, math.MaxInt64)
			rl.burst, rl.burstLine = int64(b), v.Line
		default:
			return false, nil
		}
		return true, err
	})
	return rl, err
}

func (p *parser) replaces(n *yaml.Node, field string, rl *rawLimit) error {
	if n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return p.Errorf(n.Line, field, "want a list of {name: ...}, got %s", yamlnode.Describe(n))
	}
	for i, item := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		name := ""
		err := p.Fields(item, f, func(k string, v *yaml.Node, kf string) (bool, error) {
			if k != "name" {
				return false, nil
			}
			var err error
			name, err = p.Str(v, kf)
			return true, err
		})
		if err != nil {
			return err
		}
		rl.replaces = append(rl.replaces, name)
		rl.replacesLines = append(rl.replacesLines, yamlnode.Resolve(item).Line)
	}
	return nil
}

// limit checks a rate_limit block and builds its Limit at path.
func (p *parser) limit(rl *rawLimit, path string) (*Limit, error) {
	l := &Limit{Domain: p.domain, Path: path, Name: rl.name, Replaces: rl.replaces, Unlimited: rl.unlimited, line: rl.line, UnitMultiplier: 1}
	for i, r := range rl.replaces {
		f := fmt.Sprintf("%s.replaces[%d].name", rl.field, i)
		if r == "" {
			return nil, p.Errorf(rl.replacesLines[i], f, "should not have an empty replaces entry")
		}
		if r == rl.name {
			return nil, p.Errorf(rl.replacesLines[i], f, "replaces should not contain name of same descriptor (%q)", r)
		}
	}
	u, validUnit := units[strings.ToLower(rl.unit)]
	if rl.unlimited {
		if validUnit {
			return nil, p.Errorf(rl.unitLine, rl.unitField, "should not specify rate limit unit when unlimited")
		}
		if rl.algorithm != "" || rl.burst != 0 {
			return nil, p.Errorf(rl.line, rl.field, "an unlimited rate_limit takes no algorithm or burst")
		}
		l.policy, l.metric = l.Path, strings.TrimPrefix(l.Path, p.domain+".")
		return l, nil
	}
	if !validUnit {
		if rl.unitField == "" {
			return nil, p.Errorf(rl.line, configerr.Join(rl.field, "unit"), "required: want one of second, minute, hour, day, week, month, year")
		}
		return nil, p.Errorf(rl.unitLine, rl.unitField, "invalid rate limit unit %q: want one of second, minute, hour, day, week, month, year", rl.unit)
	}
	if !rl.hasRPU {
		return nil, p.Errorf(rl.line, configerr.Join(rl.field, "requests_per_unit"), "required")
	}
	if rl.hasMult {
		if rl.mult == 0 {
			return nil, p.Errorf(rl.multLine, configerr.Join(rl.field, "unit_multiplier"), "must be at least 1")
		}
		l.UnitMultiplier = uint32(rl.mult)
	}
	l.Unit, l.RequestsPerUnit = u.unit, uint32(rl.rpu)
	if max := uint64(algo.MaxWindow / u.d); uint64(l.UnitMultiplier) > max {
		return nil, p.Errorf(rl.multLine, configerr.Join(rl.field, "unit_multiplier"), "a window of %d %ss is longer than %s", l.UnitMultiplier, strings.ToLower(rl.unit), algo.MaxWindow)
	}
	l.Window = u.d * time.Duration(l.UnitMultiplier)
	l.Algorithm, l.Burst = rl.algorithm, rl.burst
	if l.Algorithm == "" {
		l.Algorithm = algo.FixedWindowName
	}
	l.proto = &rlspb.RateLimitResponse_RateLimit{Name: rl.name, RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit}
	if rl.hasMult {
		l.proto.UnitMultiplier = wrapperspb.UInt32(l.UnitMultiplier)
	}
	l.policy = l.Name
	if l.policy == "" {
		l.policy = l.Path
	}
	l.metric = strings.TrimPrefix(l.Path, p.domain+".")
	if l.RequestsPerUnit == 0 {
		// Allows nothing (a block list entry): no algorithm takes a
		// limit of 0, and none is needed.
		if rl.burst != 0 {
			return nil, p.Errorf(rl.burstLine, configerr.Join(rl.field, "burst"), "a rate_limit of 0 requests takes no burst")
		}
		if _, ok := algoKnown(l.Algorithm); !ok {
			return nil, p.Errorf(rl.algorithmLine, configerr.Join(rl.field, "algorithm"), "must be one of %v, got %q", algo.Names, l.Algorithm)
		}
		return l, nil
	}
	a, err := algo.New(l.Algorithm, algo.Params{Limit: int64(l.RequestsPerUnit), Window: l.Window, Burst: l.Burst})
	if err != nil {
		var pe *algo.ParamError
		switch {
		case errors.As(err, &pe) && pe.Field == "burst":
			return nil, &configerr.Error{File: p.File, Line: rl.burstLine, Field: configerr.Join(rl.field, "burst"), Reason: pe.Reason, Err: err}
		case errors.As(err, &pe):
			field := map[string]string{"limit": "requests_per_unit", "window": "unit"}[pe.Field]
			if field == "" {
				field = pe.Field
			}
			line := rl.line
			if field == "requests_per_unit" {
				line = rl.rpuLine
			}
			return nil, &configerr.Error{File: p.File, Line: line, Field: configerr.Join(rl.field, field), Reason: pe.Reason, Err: err}
		default:
			return nil, &configerr.Error{File: p.File, Line: rl.algorithmLine, Field: configerr.Join(rl.field, "algorithm"), Reason: fmt.Sprintf("must be one of %v, got %q", algo.Names, l.Algorithm), Err: err}
		}
	}
	l.limit = engine.Limit{Namespace: l.Path, Algorithm: a}
	return l, nil
}

func algoKnown(name string) (string, bool) {
	for _, n := range algo.Names {
		if n == name {
			return n, true
		}
	}
	return "", false
}
