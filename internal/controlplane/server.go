package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	sotwv3 "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Options configure a Server. Zero values take the defaults named.
type Options struct {
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Registerer takes tiercache_connected_sidecars{namespace,tier} and
	// tiercache_xds_nacks_total{namespace,tier}: the tier's namespace and
	// name, the labels the sidecars' own series get from their scrape, so
	// that one query can join both (the operator's ServiceMonitor honours
	// them); nil registers nothing.
	Registerer prometheus.Registerer
	// KeepAliveTime is how long a connection may be idle before the
	// server pings it (default 30s); KeepAliveTimeout how long it waits
	// for the answer before closing it (default 10s).
	KeepAliveTime    time.Duration
	KeepAliveTimeout time.Duration
	// KeepAliveMinTime is the shortest client ping interval tolerated;
	// clients pinging more often are disconnected (default 10s; the
	// Client pings every 30s).
	KeepAliveMinTime time.Duration
	// MaxConcurrentStreams per connection (default 16; a sidecar needs
	// one).
	MaxConcurrentStreams uint32
	// ShutdownTimeout bounds the graceful stop when Serve's context ends
	// (default 5s); then connections are closed hard.
	ShutdownTimeout time.Duration
	// OnNACK, when set, is called for every NACK, on the stream's
	// goroutine and outside the Server's locks: it must return promptly
	// (a blocked call holds up that stream, and makes Serve's shutdown
	// wait for ShutdownTimeout).
	OnNACK func(NACK)
	// OnChange, when set, is called with a tier's key whenever what
	// Sidecars reports for it changes (a stream counted or closed, a
	// sidecar that applied or refused a version, a NACK), outside the
	// Server's locks. It is called once per such request: it must not
	// block (signal a channel with room, or drop).
	OnChange func(tier string)
	// Now is the clock for NACK times; default time.Now.
	Now func() time.Time
	// Authenticate, when set, checks every stream before anything of it
	// is served or counted (see Authenticator); nil serves any node the
	// tier it claims (development and tests only).
	Authenticate Authenticator
	// Relay, when set, is served on the same server (relay.go): its
	// Publish and Subscribe calls are authenticated with Authenticate.
	Relay *Relay
	// GRPCOptions are added after the ones above: pass
	// grpc.Creds(credentials.NewTLS(...)) here to serve TLS.
	GRPCOptions []grpc.ServerOption
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.KeepAliveTime == 0 {
		o.KeepAliveTime = 30 * time.Second
	}
	if o.KeepAliveTimeout == 0 {
		o.KeepAliveTimeout = 10 * time.Second
	}
	if o.KeepAliveMinTime == 0 {
		o.KeepAliveMinTime = 10 * time.Second
	}
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = 16
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"KeepAliveTime", o.KeepAliveTime},
		{"KeepAliveTimeout", o.KeepAliveTimeout},
		{"KeepAliveMinTime", o.KeepAliveMinTime},
		{"ShutdownTimeout", o.ShutdownTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("controlplane: %s: must be >= 0 (got %s)", d.name, d.v))
		}
	}
	return errors.Join(errs...)
}

// NACK is one rejection of a pushed config by a sidecar.
type NACK struct {
	// Tier is "<namespace>/<tier>", Node the sidecar's "<namespace>/<pod>".
	Tier, Node string
	// Version is the rejected version; Message the sidecar's reason.
	Version, Message string
	At               time.Time
}

// NACKStats are the NACKs of one tier.
type NACKStats struct {
	// Total counts every NACK since the server started.
	Total uint64
	// Last is the most recent one (zero when Total is 0).
	Last NACK
}

// Server is the operator's end of the config wire: it serves each tier's
// published config to that tier's sidecars over ADS (SotW).
type Server struct {
	opts  Options
	log   *slog.Logger
	cache *tierCache

	connectedGauge *prometheus.GaugeVec
	nackCounter    *prometheus.CounterVec

	mu        sync.Mutex
	streams   map[int64]*streamInfo // by xDS stream ID
	connected map[string]int        // by tier
	nacks     map[string]*NACKStats // by tier
}

type streamInfo struct {
	tier, node string
	// lastVersion is the version last sent on the stream: the one a
	// NACK rejects.
	lastVersion string
	// applied is the version the sidecar holds: the version_info of its
	// latest request, ACK or NACK ("" when it is no version).
	applied string
	// rejected is the version its latest answer refused; an ACK clears
	// it.
	rejected string
}

// NewServer returns a Server with nothing published.
func NewServer(opts Options) (*Server, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	s := &Server{
		opts:  opts,
		log:   opts.Logger,
		cache: newTierCache(),
		connectedGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tiercache_connected_sidecars",
			Help: "Sidecars with an open xDS stream to this operator, by tier (its namespace and name).",
		}, []string{"namespace", "tier"}),
		nackCounter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiercache_xds_nacks_total",
			Help: "Pushed configs rejected by sidecars, by tier (its namespace and name).",
		}, []string{"namespace", "tier"}),
		streams:   make(map[int64]*streamInfo),
		connected: make(map[string]int),
		nacks:     make(map[string]*NACKStats),
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{s.connectedGauge, s.nackCounter} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("controlplane: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Publish makes c (defaults filled in) the config of tierKey
// ("<namespace>/<tier>") and pushes it to the tier's sidecars. It refuses a
// config that fails Validate. changed is false, and nothing is sent, when
// the tier already has this version.
func (s *Server) Publish(ctx context.Context, tierKey string, c tierconfig.Config) (version string, changed bool, err error) {
	if err := ctx.Err(); err != nil {
		return "", false, err
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return "", false, fmt.Errorf("publish %s: %w", tierKey, err)
	}
	res, version, err := Encode(tierKey, c)
	if err != nil {
		return "", false, fmt.Errorf("publish: %w", err)
	}
	packed, err := anypb.New(res)
	if err != nil {
		return "", false, fmt.Errorf("publish %s: %w", tierKey, err)
	}
	return version, s.publishResource(tierKey, res.GetName(), version, packed), nil
}

// publishResource sets a resource without any check (tests use it to push
// what Publish refuses).
func (s *Server) publishResource(tierKey, name, version string, res *anypb.Any) bool {
	changed := s.cache.set(tierKey, name, version, res)
	if changed {
		s.log.Debug("xds: published", "tier", tierKey, "version", version)
	}
	return changed
}

// Version returns the version published for tierKey, or "" if none.
func (s *Server) Version(tierKey string) string { return s.cache.version(tierKey) }

// Clear withdraws tierKey's config (its CacheTier is gone) and forgets its
// NACKs. Its sidecars keep the config they have; if the tier is published
// again, those still connected receive it.
func (s *Server) Clear(tierKey string) {
	s.cache.clear(tierKey)
	s.mu.Lock()
	_, had := s.nacks[tierKey]
	delete(s.nacks, tierKey)
	s.mu.Unlock()
	if had && s.opts.OnChange != nil {
		s.opts.OnChange(tierKey)
	}
}

// Connected is the number of sidecars of tierKey with an open stream.
func (s *Server) Connected(tierKey string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connected[tierKey]
}

// NACKs returns the NACKs of tierKey.
func (s *Server) NACKs(tierKey string) NACKStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.nacks[tierKey]; n != nil {
		return *n
	}
	return NACKStats{}
}

// Serve serves ADS on l until ctx ends, then stops gracefully within
// Options.ShutdownTimeout (open streams are ended first: they never end on
// their own) and returns nil, or closes every connection at the deadline
// and returns ErrShutdownTimeout. It closes l. Serve may be called again
// with a new listener after it returned.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	xdsCtx, cancelXDS := context.WithCancel(ctx)
	defer cancelXDS()
	gs := grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxConcurrentStreams(s.opts.MaxConcurrentStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    s.opts.KeepAliveTime,
			Timeout: s.opts.KeepAliveTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             s.opts.KeepAliveMinTime,
			PermitWithoutStream: true,
		}),
	}, s.opts.GRPCOptions...)...)
	handlers := &handlerSet{idle: make(chan struct{})}
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(gs, ads{sotw: sotwv3.NewServer(xdsCtx, s.cache, callbacks{s}), handlers: handlers, auth: s.opts.Authenticate, ctx: xdsCtx, log: s.log})
	if r := s.opts.Relay; r != nil {
		r.open()
		gs.RegisterService(&relayServiceDesc, &relayServer{r: r, auth: s.opts.Authenticate, ctx: xdsCtx, handlers: handlers, log: s.log})
	}

	served := make(chan error, 1)
	go func() { served <- gs.Serve(l) }()
	select {
	case err := <-served:
		// The listener failed; streams may still be open.
		gs.Stop()
		return fmt.Errorf("controlplane: serve: %w", err)
	case <-ctx.Done():
	}
	// Streams never end on their own: ending xdsCtx ends them, each with
	// an OK status, so sidecars reconnect (to another replica) at once.
	// Wait for that rather than use GracefulStop, which would wait
	// forever for a handler stuck in a callback (OnNACK), and hold the
	// lock that Stop needs meanwhile. Relayed messages stop first, so
	// that peers' streams end cleanly once what is queued is sent.
	if s.opts.Relay != nil {
		s.opts.Relay.close()
	}
	cancelXDS()
	drained := handlers.close()
	t := time.NewTimer(s.opts.ShutdownTimeout)
	defer t.Stop()
	var err error
	select {
	case <-drained:
	case <-t.C:
		// The stuck handler's goroutine ends when the callback returns.
		err = fmt.Errorf("%w (%s): connections closed", ErrShutdownTimeout, s.opts.ShutdownTimeout)
	}
	gs.Stop()
	<-served
	return err
}

// ErrShutdownTimeout is returned by Serve when the graceful stop did not
// finish within Options.ShutdownTimeout.
var ErrShutdownTimeout = errors.New("controlplane: graceful stop timed out")

// ads serves SotW ADS only. (go-control-plane's pkg/server/v3 would also
// serve delta and REST, but it pulls in the separate ratelimit module.)
type ads struct {
	sotw     sotwv3.Server
	handlers *handlerSet
	auth     Authenticator
	ctx      context.Context // ends when Serve stops
	log      *slog.Logger
}

func (a ads) StreamAggregatedResources(stream discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	if !a.handlers.enter() {
		return status.Error(codes.Unavailable, "control plane shutting down")
	}
	defer a.handlers.exit()
	if a.auth == nil {
		return a.sotw.StreamHandler(stream, resourcev3.AnyType)
	}
	as, err := authenticate(a.ctx, stream, a.auth)
	if err != nil {
		a.log.Warn("xds: stream refused", "peer", peerAddr(stream.Context()), "code", status.Code(err).String(), "reason", status.Convert(err).Message())
		return err
	}
	defer as.cancel()
	err = a.sotw.StreamHandler(as, resourcev3.AnyType)
	if f := as.failure(); f != nil {
		a.log.Info("xds: stream ended", "node", as.id, "tier", as.cluster, "reason", status.Convert(f).Message())
		return f
	}
	return err
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// handlerSet counts running stream handlers so that Serve can wait for
// them to end, and refuses new ones once it waits.
type handlerSet struct {
	mu      sync.Mutex
	n       int
	closing bool
	idle    chan struct{} // closed when closing and n == 0
}

func (h *handlerSet) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.n++
	return true
}

func (h *handlerSet) exit() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n--
	if h.closing && h.n == 0 {
		close(h.idle)
	}
}

// close refuses new handlers and returns a channel closed once none runs.
func (h *handlerSet) close() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closing = true
	if h.n == 0 {
		close(h.idle)
	}
	return h.idle
}

func (ads) DeltaAggregatedResources(discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return status.Error(codes.Unimplemented, "delta xDS is not supported: use SotW ADS")
}

// callbacks track streams per tier, NACKs and the version each stream was
// last sent.
type callbacks struct{ s *Server }

func (callbacks) OnStreamOpen(context.Context, int64, string) error { return nil }

func (c callbacks) OnStreamClosed(id int64, _ *corev3.Node) { c.s.onStreamClosed(id) }

func (c callbacks) OnStreamRequest(id int64, req *discoverygrpc.DiscoveryRequest) error {
	return c.s.onStreamRequest(id, req)
}

func (c callbacks) OnStreamResponse(_ context.Context, id int64, _ *discoverygrpc.DiscoveryRequest, resp *discoverygrpc.DiscoveryResponse) {
	c.s.onStreamResponse(id, resp)
}

func (s *Server) onStreamRequest(id int64, req *discoverygrpc.DiscoveryRequest) error {
	var nack *NACK
	s.mu.Lock()
	st := s.streams[id]
	changed := st == nil
	if st == nil {
		// The server fills req.Node from the stream's first request.
		tier := req.GetNode().GetCluster()
		if err := ValidateTierKey(tier); err != nil {
			s.mu.Unlock()
			return status.Errorf(codes.InvalidArgument, "node.cluster: %v", err)
		}
		st = &streamInfo{tier: tier, node: req.GetNode().GetId()}
		s.streams[id] = st
		s.connected[st.tier]++
		s.connectedGauge.WithLabelValues(tierLabels(st.tier)...).Inc()
	}
	// A request names the version the sidecar holds, ACK or NACK alike:
	// a NACK carries the last version it accepted.
	applied, rejected := versionOrEmpty(req.GetVersionInfo()), ""
	if d := req.GetErrorDetail(); d != nil {
		rejected = st.lastVersion
		n := s.nacks[st.tier]
		if n == nil {
			n = &NACKStats{}
			s.nacks[st.tier] = n
		}
		n.Total++
		n.Last = NACK{Tier: st.tier, Node: st.node, Version: st.lastVersion, Message: d.GetMessage(), At: s.opts.Now()}
		s.nackCounter.WithLabelValues(tierLabels(st.tier)...).Inc()
		last := n.Last
		nack = &last
		changed = true
	}
	if st.applied != applied || st.rejected != rejected {
		st.applied, st.rejected = applied, rejected
		changed = true
	}
	tier := st.tier
	s.mu.Unlock()
	if nack != nil {
		s.log.Warn("xds: sidecar rejected config", "tier", nack.Tier, "node", nack.Node, "version", nack.Version, "reason", nack.Message)
		if s.opts.OnNACK != nil {
			s.opts.OnNACK(*nack)
		}
	}
	if changed && s.opts.OnChange != nil {
		s.opts.OnChange(tier)
	}
	return nil
}

// versionOrEmpty returns v when it can be a version (1 to 64 lowercase
// hex digits, as Version makes them), else "": a sidecar's version_info
// is its own to send, and is reported further.
func versionOrEmpty(v string) string {
	if len(v) == 0 || len(v) > 64 {
		return ""
	}
	for i := range len(v) {
		if c := v[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return ""
		}
	}
	return v
}

func (s *Server) onStreamResponse(id int64, resp *discoverygrpc.DiscoveryResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.streams[id]; st != nil {
		st.lastVersion = resp.GetVersionInfo()
	}
}

func (s *Server) onStreamClosed(id int64) {
	s.mu.Lock()
	st := s.streams[id]
	if st == nil {
		s.mu.Unlock()
		return
	}
	delete(s.streams, id)
	s.connected[st.tier]--
	if s.connected[st.tier] == 0 {
		delete(s.connected, st.tier)
		// No series is left behind for a tier without sidecars.
		s.connectedGauge.DeleteLabelValues(tierLabels(st.tier)...)
	} else {
		s.connectedGauge.WithLabelValues(tierLabels(st.tier)...).Dec()
	}
	s.mu.Unlock()
	if s.opts.OnChange != nil {
		s.opts.OnChange(st.tier)
	}
}

// tierLabels are the namespace and tier label values of a tier key
// ("namespace/name", checked by ValidateTierKey).
func tierLabels(key string) []string {
	ns, name, _ := strings.Cut(key, "/")
	return []string{ns, name}
}
