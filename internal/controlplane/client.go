package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/tiercache/tiercache/internal/backoff"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// ApplyFunc puts a validated config into effect. An error rejects the
// config (the Client NACKs it with the error's text).
type ApplyFunc func(ctx context.Context, c tierconfig.Config, version string) error

// ClientOptions configure a Client.
type ClientOptions struct {
	// Target is the operator's xDS address (gRPC target, e.g.
	// "tiercache-operator.tiercache-system:18000"). Required.
	Target string
	// Namespace, Pod and Tier identify the sidecar: node id
	// "<Namespace>/<Pod>", node cluster "<Namespace>/<Tier>". Required.
	Namespace, Pod, Tier string
	// Apply is called for each new valid config. Required.
	Apply ApplyFunc
	// LastGoodPath, when set, receives every applied config's JSON
	// (written atomically); the sidecar reads it back at start with
	// tierconfig.Load (sidecar.startupConfig).
	LastGoodPath string
	// InitialVersion is the version already in effect (Version of the
	// config loaded at start-up): it is sent on connecting and is not
	// applied again.
	InitialVersion string
	// Registerer takes tiercache_control_plane_connected,
	// tiercache_config_applied_timestamp_seconds and
	// tiercache_config_nacks_total; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger; default slog.Default().
	Logger *slog.Logger
	// TokenFile, when set, holds the bearer token sent as the
	// "authorization" metadata of every stream: a projected
	// ServiceAccount token, which the kubelet refreshes, so it is read
	// again on every (re)connect. A file that cannot be read fails that
	// attempt (logged, retried with backoff); the config in effect stays.
	TokenFile string
	// DialOptions are added after the defaults (plaintext, keepalive
	// pings every 30s): pass TLS credentials here.
	DialOptions []grpc.DialOption
	// Backoff between reconnection attempts.
	Backoff Backoff
	// Rand returns a number in [0, 1) for the backoff jitter; default
	// math/rand/v2.Float64.
	Rand func() float64
	// Now stamps applied configs; default time.Now.
	Now func() time.Time
}

// ClientState is what a Client has done so far.
type ClientState struct {
	// Connected is true while a stream to the control plane is open.
	Connected bool
	// Version in effect ("" before the first) and when it was applied
	// (zero for InitialVersion).
	Version   string
	AppliedAt time.Time
	// Responses counts every response received; NACKs those rejected,
	// LastNACK the reason of the last one.
	Responses uint64
	NACKs     uint64
	LastNACK  string
}

// Client is the sidecar's end of the config wire: it subscribes to its
// tier's config over ADS and applies each new valid version.
type Client struct {
	opts     ClientOptions
	log      *slog.Logger
	nodeID   string
	resource string // "<namespace>/<tier>": node cluster and resource name
	dial     []grpc.DialOption

	connectedGauge prometheus.Gauge
	appliedGauge   prometheus.Gauge
	nackCounter    prometheus.Counter

	mu sync.Mutex
	// state is what the client has done, for tests to read (State, in
	// observe_test.go); the product reports it through the gauges above.
	state ClientState
	// acked is the version the client last accepted (what it sends as
	// version_info); applied configs move it, NACKs do not.
	acked string
}

// NewClient checks opts and returns a Client; Run starts it.
func NewClient(opts ClientOptions) (*Client, error) {
	errs := checkPeer("controlplane client", opts.Target, opts.Namespace, opts.Pod, opts.Tier)
	if opts.Apply == nil {
		errs = append(errs, errors.New("controlplane client: apply: required"))
	}
	opts.Backoff = opts.Backoff.withDefaults()
	if err := opts.Backoff.validate(); err != nil {
		errs = append(errs, fmt.Errorf("controlplane client: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := &Client{
		opts:     opts,
		log:      opts.Logger,
		nodeID:   opts.Namespace + "/" + opts.Pod,
		resource: opts.Namespace + "/" + opts.Tier,
		dial: append([]grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		}, opts.DialOptions...),
		connectedGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tiercache_control_plane_connected",
			Help: "1 while the sidecar has an open xDS stream to the operator.",
		}),
		appliedGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tiercache_config_applied_timestamp_seconds",
			Help: "Unix time the config in effect was applied from the control plane.",
		}),
		nackCounter: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tiercache_config_nacks_total",
			Help: "Configs pushed by the control plane and rejected.",
		}),
		state: ClientState{Version: opts.InitialVersion},
		acked: opts.InitialVersion,
	}
	if opts.Registerer != nil {
		for _, col := range []prometheus.Collector{c.connectedGauge, c.appliedGauge, c.nackCounter} {
			if err := opts.Registerer.Register(col); err != nil {
				return nil, fmt.Errorf("controlplane client: register metrics: %w", err)
			}
		}
	}
	return c, nil
}

// Run subscribes until ctx ends, reconnecting with jittered exponential
// backoff whenever the stream fails; it returns nil when ctx ends. The
// config in effect stays in effect while disconnected. Apply is called on
// Run's goroutine, one config at a time.
func (c *Client) Run(ctx context.Context) error {
	attempt := 0
	for {
		progressed, err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if progressed {
			attempt = 0
		}
		d := c.opts.Backoff.Delay(attempt, c.opts.Rand())
		attempt++
		level := slog.LevelWarn
		if IsConnError(err) {
			level = slog.LevelInfo
		}
		c.log.Log(ctx, level, "xds: stream to control plane ended, reconnecting", "target", c.opts.Target, "err", err, "in", d)
		if !backoff.Sleep(ctx, d) {
			return nil
		}
	}
}

// session runs one ADS stream over its own connection (so that Run's
// backoff, not gRPC's, paces reconnection). progressed reports that the
// server answered at least once.
func (c *Client) session(ctx context.Context) (progressed bool, err error) {
	if c.opts.TokenFile != "" {
		tok, err := readToken(c.opts.TokenFile)
		if err != nil {
			return false, err
		}
		ctx = metadata.AppendToOutgoingContext(ctx, AuthorizationKey, "Bearer "+tok)
	}
	conn, err := grpc.NewClient(c.opts.Target, c.dial...)
	if err != nil {
		return false, fmt.Errorf("dial %s: %w", c.opts.Target, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, fmt.Errorf("open stream: %w", err)
	}
	c.mu.Lock()
	first := c.request(c.acked, "", nil)
	c.mu.Unlock()
	if err := stream.Send(first); err != nil {
		return false, fmt.Errorf("send: %w", err)
	}
	c.setConnected(true)
	defer c.setConnected(false)
	for {
		resp, err := stream.Recv()
		if err != nil {
			return progressed, fmt.Errorf("receive: %w", err)
		}
		progressed = true
		if err := stream.Send(c.handle(ctx, resp)); err != nil {
			return progressed, fmt.Errorf("send: %w", err)
		}
	}
}

// handle takes one response and returns the ACK or NACK to send.
func (c *Client) handle(ctx context.Context, resp *discoveryv3.DiscoveryResponse) *discoveryv3.DiscoveryRequest {
	version := resp.GetVersionInfo()
	c.mu.Lock()
	c.state.Responses++
	current := c.state.Version
	c.mu.Unlock()

	if version == current && version != "" {
		// Already in effect (a reconnect, or an operator restart): a
		// no-op.
		return c.ack(resp, version)
	}
	cfg, found, err := c.pick(resp)
	switch {
	case err != nil:
		return c.nack(resp, version, err.Error())
	case !found:
		// The tier's config was withdrawn: keep the one in effect.
		c.log.Warn("xds: response without this tier's config, keeping the config in effect", "resource", c.resource, "version", version)
		return c.ack(resp, version)
	}
	if err := c.opts.Apply(ctx, cfg, version); err != nil {
		return c.nack(resp, version, fmt.Sprintf("apply: %v", err))
	}
	now := c.opts.Now()
	c.log.Info("xds: config applied", "resource", c.resource, "version", version)
	if c.opts.LastGoodPath != "" {
		// The config is in effect whatever happens to the file: not a
		// reason to NACK.
		if err := saveLastGood(c.opts.LastGoodPath, cfg); err != nil {
			c.log.Error("xds: config applied but not persisted", "err", err)
		}
	}
	c.mu.Lock()
	c.state.Version, c.state.AppliedAt = version, now
	c.mu.Unlock()
	c.appliedGauge.Set(float64(now.UnixNano()) / 1e9)
	return c.ack(resp, version)
}

// pick finds and decodes this tier's resource in resp.
func (c *Client) pick(resp *discoveryv3.DiscoveryResponse) (tierconfig.Config, bool, error) {
	if resp.GetTypeUrl() != ResourceTypeURL {
		return tierconfig.Config{}, false, fmt.Errorf("%w: response type is %q, want %q", ErrDecode, resp.GetTypeUrl(), ResourceTypeURL)
	}
	res := resp.GetResources()
	if len(res) == 0 {
		return tierconfig.Config{}, false, nil
	}
	for _, r := range res {
		if resourceName(r) == c.resource {
			cfg, err := Decode(r)
			return cfg, true, err
		}
	}
	if len(res) == 1 {
		if _, err := Decode(res[0]); err != nil {
			return tierconfig.Config{}, false, err
		}
	}
	names := make([]string, len(res))
	for i, r := range res {
		names[i] = strconv.Quote(resourceName(r))
	}
	return tierconfig.Config{}, false, fmt.Errorf("%w: response has no resource named %q (got %s)", ErrDecode, c.resource, strings.Join(names, ", "))
}

// resourceName is the name of a TypedExtensionConfig, or "" for anything
// else.
func resourceName(r *anypb.Any) string {
	if r.GetTypeUrl() != ResourceTypeURL {
		return ""
	}
	var tec corev3.TypedExtensionConfig
	if err := proto.Unmarshal(r.GetValue(), &tec); err != nil {
		return ""
	}
	return tec.GetName()
}

func (c *Client) ack(resp *discoveryv3.DiscoveryResponse, version string) *discoveryv3.DiscoveryRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acked = version
	return c.request(version, resp.GetNonce(), nil)
}

func (c *Client) nack(resp *discoveryv3.DiscoveryResponse, version, reason string) *discoveryv3.DiscoveryRequest {
	c.log.Warn("xds: config rejected, keeping the config in effect", "resource", c.resource, "version", version, "reason", reason)
	c.nackCounter.Inc()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.NACKs++
	c.state.LastNACK = reason
	return c.request(c.acked, resp.GetNonce(), &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: reason})
}

// request builds a DiscoveryRequest for this sidecar's resource.
func (c *Client) request(version, nonce string, errDetail *rpcstatus.Status) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{
		VersionInfo:   version,
		Node:          &corev3.Node{Id: c.nodeID, Cluster: c.resource},
		ResourceNames: []string{c.resource},
		TypeUrl:       ResourceTypeURL,
		ResponseNonce: nonce,
		ErrorDetail:   errDetail,
	}
}

func (c *Client) setConnected(v bool) {
	c.mu.Lock()
	c.state.Connected = v
	c.mu.Unlock()
	if v {
		c.connectedGauge.Set(1)
	} else {
		c.connectedGauge.Set(0)
	}
}

// IsConnError reports whether err is the control plane being unreachable
// or going away, as opposed to it refusing the sidecar.
func IsConnError(err error) bool {
	if errors.Is(err, io.EOF) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded:
		return true
	}
	return false
}

// checkPeer checks what a client of the control plane (what names
// it in errors) needs of its own: a target and the pod's identity.
func checkPeer(what, target, namespace, pod, tier string) []error {
	var errs []error
	if target == "" {
		errs = append(errs, fmt.Errorf("%s: target: required", what))
	}
	for _, f := range []struct{ name, v string }{{"namespace", namespace}, {"pod", pod}, {"tier", tier}} {
		if f.v == "" || strings.Contains(f.v, "/") {
			errs = append(errs, fmt.Errorf("%s: %s: must be non-empty without '/' (got %q)", what, f.name, f.v))
		}
	}
	return errs
}
