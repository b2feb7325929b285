// Package xds keeps an envoyrls.Server's configuration from an xDS control
// plane, as envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW: it
// opens an aggregated discovery stream (envoy.service.discovery.v3's
// StreamAggregatedResources, state of the world) asking for
// ratelimit.config.ratelimit.v3.RateLimitConfig resources, one domain
// each, and puts each response in force as a whole.
//
// A response is read as envoyproxy/ratelimit reads it: every resource is
// turned into the YAML file it stands for and checked by rlsfile.ParseFile,
// so a pushed configuration is refused for exactly what the same file
// would be. A response that does not load is NACKed with the reason, the
// configuration in force stays, and the reason is logged and passed to
// Options.OnUpdate; a later good response replaces it. A limit that keeps
// its path keeps what callers spent under it, as on a file reload.
//
// The stream is reopened after a failure, waiting between attempts from
// Options.Backoff up to Options.MaxBackoff (doubling, with jitter); the
// configuration in force stays while the control plane is away.
package xds

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	confv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/envoyrls/rlsfile"
)

// TypeURL is the type of the resources asked for: envoyproxy/ratelimit's
// RateLimitConfig.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Defaults of Options' zero fields.
const (
	DefaultNodeID     = "default"
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = 30 * time.Second
)

// RepeatWait is how long a Client waits before NACKing a response it
// refused already, sent again.
const RepeatWait = time.Second

// Options configure a Client. Server is required.
type Options struct {
	// Server is the control plane's address, host:port (a gRPC target).
	Server string
	// NodeID names this process to the control plane, which keys its
	// snapshots by it; empty means DefaultNodeID.
	NodeID string
	// NodeMetadata is sent as the node's metadata, each value a string.
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata on the stream (an authorization
	// header, say).
	Headers map[string]string
	// TLS, if not nil, secures the connection; nil means plaintext.
	TLS *tls.Config
	// MaxMessageSize bounds a response's size in bytes; zero means gRPC's
	// default (4 MiB).
	MaxMessageSize int
	// Load is how the resources are read: with Load.MergeDomains several
	// resources of one domain are merged, as files are.
	Load envoyrls.LoadOptions
	// Backoff is the first wait before reopening a failed stream, doubled
	// after each failure up to MaxBackoff; zero means DefaultBackoff and
	// DefaultMaxBackoff. A stream that delivered a response starts again
	// from Backoff.
	Backoff, MaxBackoff time.Duration
	// Logger receives connections (Info), configurations put in force
	// (Info) and refused (Error); nil means slog.Default().
	Logger *slog.Logger
	// OnUpdate, if not nil, is called after each response: with the
	// configuration put in force and a nil error, or with nil and the
	// reason the response was refused. Calls are serialised.
	OnUpdate func(version string, cfg *envoyrls.Config, err error)
}

// Client keeps a Server's configuration from a control plane. Start one
// with Start; Close stops it.
type Client struct {
	srv    *envoyrls.Server
	opts   Options
	log    *slog.Logger
	conn   *grpc.ClientConn
	node   *corev3.Node
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	first     chan struct{} // closed once a configuration is in force
	firstOnce sync.Once
}

// Start connects to the control plane and keeps srv's configuration from
// it until Close. It returns at once: the first configuration comes when
// the control plane sends it (Ready). An error is a bad option.
func Start(srv *envoyrls.Server, o Options) (*Client, error) {
	if srv == nil {
		return nil, errors.New("sluice/envoyrls/xds: Start needs a server")
	}
	if o.Server == "" {
		return nil, errors.New("sluice/envoyrls/xds: Options.Server: the control plane's address is required")
	}
	if o.NodeID == "" {
		o.NodeID = DefaultNodeID
	}
	if o.Backoff <= 0 {
		o.Backoff = DefaultBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = max(DefaultMaxBackoff, o.Backoff)
	}
	if o.MaxBackoff < o.Backoff {
		return nil, fmt.Errorf("sluice/envoyrls/xds: Options.MaxBackoff %v is shorter than Backoff %v", o.MaxBackoff, o.Backoff)
	}
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if o.MaxMessageSize > 0 {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.MaxMessageSize)))
	}
	conn, err := grpc.NewClient(o.Server, dial...)
	if err != nil {
		return nil, fmt.Errorf("sluice/envoyrls/xds: control plane %s: %w", o.Server, err)
	}
	c := &Client{srv: srv, opts: o, log: o.Logger, conn: conn, done: make(chan struct{}), first: make(chan struct{})}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.node = &corev3.Node{Id: o.NodeID}
	if len(o.NodeMetadata) > 0 {
		fields := make(map[string]*structpb.Value, len(o.NodeMetadata))
		for k, v := range o.NodeMetadata {
			fields[k] = structpb.NewStringValue(v)
		}
		c.node.Metadata = &structpb.Struct{Fields: fields}
	}
	c.ctx, c.cancel = context.WithCancel(metadata.NewOutgoingContext(context.Background(), metadata.New(o.Headers)))
	go c.run()
	return c, nil
}

// Ready is closed once a configuration from the control plane is in force.
func (c *Client) Ready() <-chan struct{} { return c.first }

// Close stops the stream and waits for the client to finish. The
// configuration in force stays.
func (c *Client) Close() error {
	c.cancel()
	<-c.done
	return c.conn.Close()
}

// run keeps a stream open until Close, waiting between failed attempts.
func (c *Client) run() {
	defer close(c.done)
	wait := c.opts.Backoff
	for {
		delivered, err := c.stream()
		if c.ctx.Err() != nil {
			return
		}
		if delivered {
			wait = c.opts.Backoff
		}
		// Full jitter over the upper half: callers of one control plane
		// do not reconnect in step.
		d := wait/2 + rand.N(wait/2+1)
		c.log.Warn("sluice rls: the xDS stream failed; reconnecting", "server", c.opts.Server, "err", err, "in", d.Round(time.Millisecond))
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(d):
		}
		wait = min(2*wait, c.opts.MaxBackoff)
	}
}

// stream runs one discovery stream until it fails, reporting whether it
// delivered a response.
func (c *Client) stream() (delivered bool, err error) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	// The version in force is what a reopened stream says it has, so the
	// control plane can skip sending it again.
	accepted := ""
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL}); err != nil {
		return false, err
	}
	c.log.Info("sluice rls: xDS stream open", "server", c.opts.Server, "node", c.opts.NodeID)
	// A control plane may answer a NACK by sending the refused response
	// again at once (go-control-plane's snapshot cache does, as the
	// NACK names the version in force): such a repeat is refused without
	// reading, logging or counting it again, and its NACK waits
	// RepeatWait, so the two do not spin (and a fix pushed meanwhile is
	// taken at most RepeatWait late).
	var refused struct {
		version string
		digest  uint64
		err     error
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return delivered, err
		}
		delivered = true
		req := &discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, ResponseNonce: resp.GetNonce()}
		digest := digestOf(resp)
		repeat := refused.err != nil && resp.GetVersionInfo() == refused.version && digest == refused.digest
		switch {
		case repeat:
			err = refused.err
			select {
			case <-ctx.Done():
				return delivered, ctx.Err()
			case <-time.After(RepeatWait):
			}
		case resp.GetTypeUrl() != TypeURL:
			err = fmt.Errorf("sluice/envoyrls/xds: response of type %q, want %q", resp.GetTypeUrl(), TypeURL)
			c.log.Error("sluice rls: response from the control plane rejected", "err", err)
		default:
			err = c.apply(resp)
		}
		switch {
		case err == nil:
			refused.err = nil
		case !repeat:
			refused.version, refused.digest, refused.err = resp.GetVersionInfo(), digest, err
		}
		if err != nil {
			req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		} else {
			accepted = resp.GetVersionInfo()
		}
		req.VersionInfo = accepted
		if err := st.Send(req); err != nil {
			return delivered, err
		}
	}
}

// apply puts a response's configuration in force, or says why not.
func (c *Client) apply(resp *discoveryv3.DiscoveryResponse) error {
	version := resp.GetVersionInfo()
	cfg, err := Decode(resp, c.opts.Load)
	if err != nil {
		c.log.Error("sluice rls: configuration from the control plane rejected; the one in force stays", "version", version, "err", err)
		if c.opts.OnUpdate != nil {
			c.opts.OnUpdate(version, nil, err)
		}
		return err
	}
	old := c.srv.Config()
	c.srv.SetConfig(cfg)
	if len(cfg.Domains()) == 0 {
		c.log.Warn("sluice rls: the control plane sent no configuration: no domain is limited", "version", version)
	}
	c.log.Info("sluice rls: configuration from the control plane in force", "version", version, "domains", cfg.Domains(),
		"dropped", droppedLimits(old, cfg))
	if c.opts.OnUpdate != nil {
		c.opts.OnUpdate(version, cfg, nil)
	}
	c.firstOnce.Do(func() { close(c.first) })
	return nil
}

// digestOf hashes a response's resources, to know a resent one.
func digestOf(resp *discoveryv3.DiscoveryResponse) uint64 {
	h := xxhash.New()
	h.WriteString(resp.GetTypeUrl())
	for _, r := range resp.GetResources() {
		h.Write([]byte{0})
		h.WriteString(r.GetTypeUrl())
		h.Write([]byte{0})
		h.Write(r.GetValue())
	}
	return h.Sum64()
}

// Decode reads a discovery response's RateLimitConfig resources into a
// configuration, as Options.Load says. Each resource is read as the
// envoyproxy/ratelimit file it stands for; an error is a *config.Error
// whose File is "xds:" and the resource's name.
func Decode(resp *discoveryv3.DiscoveryResponse, o envoyrls.LoadOptions) (*envoyrls.Config, error) {
	domains := make([]*envoyrls.Domain, 0, len(resp.GetResources()))
	for i, res := range resp.GetResources() {
		var rc confv3.RateLimitConfig
		if err := res.UnmarshalTo(&rc); err != nil {
			return nil, fmt.Errorf("sluice/envoyrls/xds: resource %d: %w", i, err)
		}
		d, err := DecodeConfig(&rc)
		if err != nil {
			return nil, err
		}
		domains = append(domains, d)
	}
	return envoyrls.NewConfigWith(o, domains...)
}

// DecodeConfig reads one RateLimitConfig as the file it stands for.
func DecodeConfig(rc *confv3.RateLimitConfig) (*envoyrls.Domain, error) {
	name := "xds:" + rc.GetName()
	data, err := yaml.Marshal(fileOf(rc))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	d, err := rlsfile.ParseFile(name, data)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			ce.Line = 0 // a line of the YAML made here would mislead
		}
		return nil, err
	}
	return d, nil
}

// The shape of an envoyproxy/ratelimit file, as its loader turns a
// RateLimitConfig into one.
type (
	yamlFile struct {
		Domain      string           `yaml:"domain"`
		Descriptors []yamlDescriptor `yaml:"descriptors,omitempty"`
	}
	yamlDescriptor struct {
		Key            string           `yaml:"key"`
		Value          string           `yaml:"value,omitempty"`
		RateLimit      *yamlRateLimit   `yaml:"rate_limit,omitempty"`
		Descriptors    []yamlDescriptor `yaml:"descriptors,omitempty"`
		ShadowMode     bool             `yaml:"shadow_mode,omitempty"`
		DetailedMetric bool             `yaml:"detailed_metric,omitempty"`
	}
	yamlRateLimit struct {
		// Unit is the enum's name: UNKNOWN, unset, is no unit, which
		// only an unlimited limit may have.
		Unit            string        `yaml:"unit,omitempty"`
		RequestsPerUnit uint32        `yaml:"requests_per_unit"`
		Unlimited       bool          `yaml:"unlimited,omitempty"`
		Name            string        `yaml:"name,omitempty"`
		Replaces        []yamlReplace `yaml:"replaces,omitempty"`
	}
	yamlReplace struct {
		Name string `yaml:"name"`
	}
)

func fileOf(rc *confv3.RateLimitConfig) yamlFile {
	return yamlFile{Domain: rc.GetDomain(), Descriptors: descriptorsOf(rc.GetDescriptors())}
}

func descriptorsOf(ds []*confv3.RateLimitDescriptor) []yamlDescriptor {
	if len(ds) == 0 {
		return nil
	}
	out := make([]yamlDescriptor, len(ds))
	for i, d := range ds {
		out[i] = yamlDescriptor{Key: d.GetKey(), Value: d.GetValue(), Descriptors: descriptorsOf(d.GetDescriptors()),
			ShadowMode: d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric()}
		if p := d.GetRateLimit(); p != nil {
			rl := &yamlRateLimit{RequestsPerUnit: p.GetRequestsPerUnit(), Unlimited: p.GetUnlimited(), Name: p.GetName()}
			if p.GetUnit() != confv3.RateLimitUnit_UNKNOWN {
				rl.Unit = p.GetUnit().String()
			}
			for _, r := range p.GetReplaces() {
				rl.Replaces = append(rl.Replaces, yamlReplace{Name: r.GetName()})
			}
			out[i].RateLimit = rl
		}
	}
	return out
}

// maxDropped bounds the paths droppedLimits lists.
const maxDropped = 32

// droppedLimits returns the paths of the limits of old (nil: none) that
// now does not have, by domain then in file order: at most maxDropped, and
// then how many more.
func droppedLimits(old, now *envoyrls.Config) []string {
	if old == nil {
		return nil
	}
	kept := map[string]bool{}
	for _, name := range now.Domains() {
		for _, l := range now.Domain(name).Limits() {
			kept[l.Path] = true
		}
	}
	var out []string
	n := 0
	for _, name := range old.Domains() {
		for _, l := range old.Domain(name).Limits() {
			if kept[l.Path] {
				continue
			}
			if n++; n <= maxDropped {
				out = append(out, l.Path)
			}
		}
	}
	if n > maxDropped {
		out = append(out, fmt.Sprintf("and %d more", n-maxDropped))
	}
	return out
}
