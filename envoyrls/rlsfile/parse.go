package rlsfile

import (
	"errors"
	"math"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/internal/configerr"
	"github.com/sluice-go/sluice/internal/yamlnode"
)

// maxDepth bounds how deeply descriptors nest; deeper is refused.
const maxDepth = 64

// ParseFile reads one configuration file, named name in errors, into its
// domain (envoyrls.NewDomain). Keys unknown to both envoyproxy/ratelimit
// and Sluice are refused, as envoyproxy/ratelimit refuses them; aliases
// and merge keys ("<<") are followed, as its YAML reader follows them.
// Every error is a *config.Error naming the file, the line and the field;
// of several, the first in the file is the one returned.
func ParseFile(name string, data []byte) (*envoyrls.Domain, error) {
	d, _, err := parseFile(name, data)
	return d, err
}

// parseFile is ParseFile that also returns the file's allow_empty.
func parseFile(name string, data []byte) (*envoyrls.Domain, bool, error) {
	p := &parser{
		Reader: yamlnode.Reader{File: name, Aliases: true, KeyError: "config error, key is not of type string: %s"},
		lines:  map[string]int{},
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, false, p.SyntaxError(err, data)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, false, p.Errorf(0, "domain", "required: the file is empty")
	}
	root := yamlnode.Resolve(doc.Content[0])
	var domain string
	var descs *yaml.Node
	var allowEmpty bool
	allowLine := 0
	err := p.Fields(root, "", func(key string, v *yaml.Node, field string) (bool, error) {
		switch key {
		case "domain":
			var err error
			domain, err = p.Str(v, field)
			return true, err
		case "descriptors":
			descs = v
			return true, nil
		case "allow_empty":
			var err error
			allowEmpty, err = p.Bool(v, field)
			allowLine = v.Line
			return true, err
		}
		return false, nil
	})
	if err != nil {
		return nil, false, err
	}
	if domain == "" {
		return nil, false, p.Errorf(root.Line, "domain", "required: a file cannot have an empty domain")
	}
	var ds []envoyrls.Descriptor
	var readErr error
	if descs != nil {
		ds, readErr = p.descriptors(descs, "descriptors", 1)
	}
	// The descriptors read before a reading error are checked first: an
	// error among them comes earlier in the file.
	d, err := envoyrls.NewDomain(name, domain, ds)
	if err != nil {
		return nil, false, p.place(err)
	}
	if readErr != nil {
		return nil, false, readErr
	}
	if l := enforcing(d); allowEmpty && l != nil {
		return nil, false, p.Errorf(allowLine, "allow_empty", "true says this file limits nothing on purpose, but the descriptor %s limits: remove allow_empty or the descriptors", l.Path)
	}
	return d, allowEmpty, nil
}

// enforcing returns the first limit of d that can deny a request (neither
// unlimited nor in shadow mode), or nil when d limits nothing.
func enforcing(d *envoyrls.Domain) *envoyrls.Limit {
	for _, l := range d.Limits() {
		if !l.Unlimited && !l.Shadow {
			return l
		}
	}
	return nil
}

// parser reads one file.
type parser struct {
	yamlnode.Reader
	// lines holds the line at which an error of NewDomain about a field is
	// reported, by the field's path; a field not in it is reported at its
	// nearest enclosing one that is.
	lines map[string]int
}

// place gives an error of NewDomain the line of its field.
func (p *parser) place(err error) error {
	var ce *configerr.Error
	if !errors.As(err, &ce) || ce.Line != 0 {
		return err
	}
	for f := ce.Field; f != ""; {
		if line, ok := p.lines[f]; ok {
			ce.Line = line
			break
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return err
}

// descriptors reads the list n of descriptors at field. On an error it
// returns those read before it too: each with its own keys read, and
// those under it read so far.
func (p *parser) descriptors(n *yaml.Node, field string, depth int) ([]envoyrls.Descriptor, error) {
	n = yamlnode.Resolve(n)
	if n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.Errorf(n.Line, field, "want a list of descriptors, got %s", yamlnode.Describe(n))
	}
	if depth > maxDepth {
		return nil, p.Errorf(n.Line, field, "descriptors nest deeper than %d levels", maxDepth)
	}
	out := make([]envoyrls.Descriptor, 0, len(n.Content))
	for i, item := range n.Content {
		f := configerr.Index(field, i)
		d, children, err := p.descriptor(yamlnode.Resolve(item), f)
		if err != nil {
			return out, err
		}
		out = append(out, d)
		if children != nil {
			kids, err := p.descriptors(children, configerr.Join(f, "descriptors"), depth+1)
			out[len(out)-1].Descriptors = kids
			if err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// descriptor reads one descriptor's own keys at field, and returns the
// node of those under it, if any.
func (p *parser) descriptor(n *yaml.Node, field string) (envoyrls.Descriptor, *yaml.Node, error) {
	var d envoyrls.Descriptor
	if n.Kind != yaml.MappingNode {
		return d, nil, p.Errorf(n.Line, field, "config error, yaml file contains list of type other than map: got %s", yamlnode.Describe(n))
	}
	var children *yaml.Node
	keyLine := n.Line
	err := p.Fields(n, field, func(k string, v *yaml.Node, f string) (bool, error) {
		var err error
		switch k {
		case "key":
			d.Key, err = p.Str(v, f)
			keyLine = v.Line
		case "value":
			d.Value, err = p.Str(v, f)
		case "rate_limit":
			d.RateLimit, err = p.rateLimit(v, f)
		case "descriptors":
			children = v
		case "shadow_mode":
			d.ShadowMode, err = p.Bool(v, f)
		case "quota_mode":
			d.QuotaMode, err = p.Bool(v, f)
		case "detailed_metric":
			d.DetailedMetric, err = p.Bool(v, f)
		case "value_to_metric":
			d.ValueToMetric, err = p.Bool(v, f)
		case "share_threshold":
			d.ShareThreshold, err = p.Bool(v, f)
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
		return d, nil, err
	}
	// A descriptor's errors are reported at its key (a duplicate, an
	// empty key), but share_threshold's at the descriptor, as
	// envoyproxy/ratelimit reports them.
	p.lines[field] = keyLine
	p.lines[configerr.Join(field, "key")] = keyLine
	p.lines[configerr.Join(field, "share_threshold")] = n.Line
	return d, children, nil
}

// rateLimit reads a rate_limit block at field, noting the line of each of
// its keys.
func (p *parser) rateLimit(n *yaml.Node, field string) (*envoyrls.RateLimit, error) {
	rl := &envoyrls.RateLimit{}
	p.lines[field] = n.Line
	err := p.Fields(n, field, func(k string, v *yaml.Node, f string) (bool, error) {
		var err error
		switch k {
		case "unit":
			rl.Unit, err = p.Str(v, f)
		case "requests_per_unit":
			// The proto allows a uint32; Sluice's limits stop at
			// algo.MaxLimit, which the error should say at once.
			var rpu uint64
			rpu, err = p.Uint(v, f, algo.MaxLimit)
			rl.RequestsPerUnit = new(uint32(rpu))
		case "unit_multiplier":
			var mult uint64
			mult, err = p.Uint(v, f, math.MaxUint32)
			rl.UnitMultiplier = new(uint32(mult))
		case "unlimited":
			rl.Unlimited, err = p.Bool(v, f)
		case "name":
			rl.Name, err = p.Str(v, f)
		case "replaces":
			err = p.replaces(v, f, rl)
		case "algorithm":
			var s string
			s, err = p.Str(v, f)
			rl.Algorithm = algo.Name(s)
		case "burst":
			var b uint64
			b, err = p.Uint(v, f, math.MaxInt64)
			rl.Burst = int64(b)
		case "settle_on_stream_done":
			rl.SettleOnStreamDone, err = p.Bool(v, f)
		case "calendar":
			rl.Calendar, err = p.Bool(v, f)
		case "timezone":
			rl.Timezone, err = p.Str(v, f)
		default:
			return false, nil
		}
		p.lines[f] = v.Line
		return true, err
	})
	return rl, err
}

// replaces reads rate_limit.replaces, a list of {name: ...}; an error
// about an entry is reported at the entry.
func (p *parser) replaces(n *yaml.Node, field string, rl *envoyrls.RateLimit) error {
	if n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return p.Errorf(n.Line, field, "want a list of {name: ...}, got %s", yamlnode.Describe(n))
	}
	for i, item := range n.Content {
		f := configerr.Index(field, i)
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
		rl.Replaces = append(rl.Replaces, name)
		p.lines[configerr.Join(f, "name")] = yamlnode.Resolve(item).Line
	}
	return nil
}
