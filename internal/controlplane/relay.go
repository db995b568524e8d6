package controlplane

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The invalidation relay carries a tier's sealed invalidation messages
// between the sidecars of a tier without L2 (docs/operator.md,
// "Invalidation relay"). It is a transport only: the messages are the
// ones sidecars publish on L2's channel, sealed and signed with the
// tier's invalidation key, and the operator never opens them; receivers
// check them with the code that checks L2's (invalidate.Purger).
//
// Wire: the gRPC service tiercache.relay.v1.Relay on the control plane's
// server, described by hand (relayServiceDesc) over protobuf's
// well-known types, so that it needs no generated code (protoc is not
// part of the build) and no codec of its own (gRPC's codec registry is
// global):
//
//	Publish(BytesValue) returns (Empty)          a sidecar sends a message
//	Subscribe(Empty) returns (stream BytesValue)  a sidecar receives its tier's
//	Peer(Empty) returns (stream BytesValue)       a replica receives another's
//
// Publish and Subscribe authenticate exactly as an xDS stream does: the
// node ("<namespace>/<pod>", "<namespace>/<tier>") is read from the
// metadata keys RelayNodeKey and RelayTierKey and checked with the
// Server's Authenticator, and the tier a message goes to or comes from
// is the one the credential proved. Peer is for other operator replicas
// only (PeerAuthenticator).
const (
	relayService = "tiercache.relay.v1.Relay"
	// RelayNodeKey and RelayTierKey are the metadata keys of the node id
	// and cluster a relay call claims (the xDS node's).
	RelayNodeKey = "tiercache-node"
	RelayTierKey = "tiercache-tier"
	// relayExpiresKey (header of Subscribe) is when the server ends the
	// stream for re-authentication, in Unix milliseconds (absent: never).
	relayExpiresKey = "tiercache-relay-expires"
	// relaySubscribedKey (header of Subscribe) says the subscription is
	// in place.
	relaySubscribedKey = "tiercache-relay-subscribed"
	// relayEpochKey (header of Peer) names the serving replica's log;
	// relayResumeKey (request of Peer) is "<epoch>:<seq>", the last entry
	// of that log the caller holds; relayCompleteKey (header of Peer) is
	// "true" when every entry after it is replayed.
	relayEpochKey    = "tiercache-relay-epoch"
	relayResumeKey   = "tiercache-relay-resume"
	relayCompleteKey = "tiercache-relay-complete"
)

// MaxRelayMessage bounds a relayed message (a sealed purge of many URLs
// stays far below it).
const MaxRelayMessage = 256 << 10

// maxReplayAge bounds the age of an entry a replica replays to a peer
// that reconnects: receivers refuse messages older than
// invalidate.MaxMessageAge (2m, less MaxClockSkew's 30s of clock
// disagreement), so an older one would be lost, and the peer must clear
// its sidecars instead (TestMaxReplayAgeBelowMessageAge).
const maxReplayAge = 90 * time.Second

// PeerAuthenticator checks that a Peer call comes from another replica of
// this operator (ctx carries the call's metadata) and returns its name.
type PeerAuthenticator func(ctx context.Context) (string, error)

// RelayOptions configure a Relay. Zero values take the defaults named.
type RelayOptions struct {
	Logger *slog.Logger
	// Registerer takes tiercache_relay_messages_total{event}; nil
	// registers nothing.
	Registerer prometheus.Registerer
	// QueueSize is the messages queued per sidecar subscription (default
	// 256); a subscription whose queue is full is ended, and its sidecar
	// resubscribes and clears its L1.
	QueueSize int
	// LogSize is the messages published here that are kept for peers
	// that reconnect (default 4096).
	LogSize int
	// PeerAuth admits Peer calls; nil refuses them all.
	PeerAuth PeerAuthenticator
	// PeerReauth is how long a peer's stream lasts before the peer must
	// present its token again (default 10m); it then resumes where the
	// stream stopped, losing nothing.
	PeerReauth time.Duration
	// Now defaults to time.Now.
	Now func() time.Time
}

// Relay is one replica's end of the invalidation relay: it hands each
// message published by a sidecar to the tier's sidecars subscribed here
// and to the other replicas, which hand it to theirs (RunPeers).
type Relay struct {
	opts    RelayOptions
	log     *slog.Logger
	counter *prometheus.CounterVec
	// epoch names this replica's log: a peer that knew another epoch
	// (this replica's predecessor) cannot resume in it.
	epoch uint64

	mu   sync.Mutex
	subs map[string]map[*relaySub]struct{} // sidecar subscriptions by tier
	// peers are the other replicas' Peer streams.
	peers map[*relaySub]struct{}
	// entries are the last LogSize messages published here, seq
	// numbering them from 1.
	entries []relayEntry
	seq     uint64
	closing bool
}

type relayEntry struct {
	seq  uint64
	tier string
	msg  []byte
	at   time.Time
}

// relaySub is one subscription: a bounded queue, and kill, closed when
// the queue overflowed.
type relaySub struct {
	q    chan []byte
	kill chan struct{}
	// done, for a peer, is closed by Close once every entry is queued.
	done chan struct{}
}

// Events of tiercache_relay_messages_total.
const (
	relayPublished = "published" // accepted from a sidecar of this replica
	relayForwarded = "forwarded" // received from another replica
	relayDelivered = "delivered" // queued to a sidecar subscription
	relayDropped   = "dropped"   // not queued: the subscription was ended
	relayRefused   = "refused"   // a call refused (identity, size)
)

// NewRelay returns a Relay with no subscription.
func NewRelay(opts RelayOptions) (*Relay, error) {
	if opts.QueueSize < 0 || opts.LogSize < 0 {
		return nil, fmt.Errorf("controlplane relay: QueueSize and LogSize must be >= 0 (got %d, %d)", opts.QueueSize, opts.LogSize)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.QueueSize == 0 {
		opts.QueueSize = 256
	}
	if opts.LogSize == 0 {
		opts.LogSize = 4096
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PeerReauth <= 0 {
		opts.PeerReauth = 10 * time.Minute
	}
	r := &Relay{
		opts: opts, log: opts.Logger,
		counter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiercache_relay_messages_total",
			Help: "Invalidation messages of tiers without L2 relayed by this operator replica, by event: published (by a sidecar connected here), forwarded (from another replica), delivered (to a sidecar's subscription), dropped (a subscription too slow, ended), refused (a call refused).",
		}, []string{"event"}),
		epoch: rand.Uint64() | 1,
		subs:  make(map[string]map[*relaySub]struct{}),
		peers: make(map[*relaySub]struct{}),
	}
	for _, e := range []string{relayPublished, relayForwarded, relayDelivered, relayDropped, relayRefused} {
		r.counter.WithLabelValues(e)
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(r.counter); err != nil {
			return nil, fmt.Errorf("controlplane relay: register metrics: %w", err)
		}
	}
	return r, nil
}

// Subscribers returns the sidecar subscriptions of tier on this replica.
func (r *Relay) Subscribers(tier string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.subs[tier])
}

// deliver queues msg to tier's subscriptions here and, published here, to
// the peers (logged for those that reconnect). A full queue ends its
// subscription: a slow receiver never holds up the others.
func (r *Relay) deliver(tier string, msg []byte, local bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return status.Error(codes.Unavailable, "relay: this replica is shutting down; publish again")
	}
	for s := range r.subs[tier] {
		if r.offer(s, msg) {
			r.counter.WithLabelValues(relayDelivered).Inc()
		} else {
			delete(r.subs[tier], s)
		}
	}
	if !local {
		r.counter.WithLabelValues(relayForwarded).Inc()
		return nil
	}
	r.counter.WithLabelValues(relayPublished).Inc()
	r.seq++
	e := relayEntry{seq: r.seq, tier: tier, msg: msg, at: r.opts.Now()}
	if len(r.entries) == r.opts.LogSize {
		copy(r.entries, r.entries[1:])
		r.entries = r.entries[:len(r.entries)-1]
	}
	r.entries = append(r.entries, e)
	frame := peerFrame(e)
	for s := range r.peers {
		if !r.offer(s, frame) {
			delete(r.peers, s)
		}
	}
	return nil
}

// offer queues b to s, or ends s when its queue is full. r.mu is held.
func (r *Relay) offer(s *relaySub, b []byte) bool {
	select {
	case s.q <- b:
		return true
	default:
		close(s.kill)
		r.counter.WithLabelValues(relayDropped).Inc()
		return false
	}
}

// kickAll ends every sidecar subscription here: they resubscribe, and
// clear their L1, since messages may have been missed (a peer's log
// could not be resumed).
func (r *Relay) kickAll(why string) {
	r.mu.Lock()
	n := 0
	for tier, set := range r.subs {
		for s := range set {
			close(s.kill)
			n++
		}
		delete(r.subs, tier)
	}
	r.mu.Unlock()
	if n > 0 {
		r.log.Warn("relay: ended every sidecar subscription; their sidecars clear their L1 as they resubscribe", "subscriptions", n, "reason", why)
	}
}

// open undoes close, for a Serve after one that returned.
func (r *Relay) open() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closing = false
}

// close refuses further messages and lets every peer stream end once it
// has sent what is queued (Serve calls it as it stops): a peer that sees
// the stream end cleanly knows it missed nothing.
func (r *Relay) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return
	}
	r.closing = true
	for s := range r.peers {
		close(s.done)
	}
}

func (r *Relay) subscribe(tier string) (*relaySub, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return nil, status.Error(codes.Unavailable, "relay: this replica is shutting down")
	}
	s := &relaySub{q: make(chan []byte, r.opts.QueueSize), kill: make(chan struct{})}
	set := r.subs[tier]
	if set == nil {
		set = make(map[*relaySub]struct{})
		r.subs[tier] = set
	}
	set[s] = struct{}{}
	return s, nil
}

func (r *Relay) unsubscribe(tier string, s *relaySub) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.subs[tier], s)
	if len(r.subs[tier]) == 0 {
		delete(r.subs, tier)
	}
}

// subscribePeer registers a peer stream resuming after resumeSeq of log
// resumeEpoch, queueing the entries it missed first. complete is false
// when some may be lost to it: gone from the log, or too old to be
// accepted by sidecars.
func (r *Relay) subscribePeer(resumeEpoch, resumeSeq uint64) (s *relaySub, complete bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return nil, false, status.Error(codes.Unavailable, "relay: this replica is shutting down")
	}
	if resumeEpoch != r.epoch {
		resumeSeq = 0 // another log: everything since this one began
	}
	s = &relaySub{q: make(chan []byte, r.opts.LogSize+r.opts.QueueSize), kill: make(chan struct{}), done: make(chan struct{})}
	complete = resumeSeq <= r.seq
	if len(r.entries) > 0 && r.entries[0].seq > resumeSeq+1 {
		complete = false
	}
	oldest := r.opts.Now().Add(-maxReplayAge)
	for _, e := range r.entries {
		if e.seq <= resumeSeq {
			continue
		}
		if e.at.Before(oldest) {
			complete = false
		}
		s.q <- peerFrame(e) // room: the queue holds the whole log
	}
	r.peers[s] = struct{}{}
	return s, complete, nil
}

func (r *Relay) unsubscribePeer(s *relaySub) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.peers, s)
}

// peerFrame encodes a log entry for a Peer stream: seq (8 bytes, big
// endian), the tier's length (2 bytes), the tier, the message.
func peerFrame(e relayEntry) []byte {
	b := make([]byte, 0, 10+len(e.tier)+len(e.msg))
	b = binary.BigEndian.AppendUint64(b, e.seq)
	b = binary.BigEndian.AppendUint16(b, uint16(len(e.tier)))
	b = append(b, e.tier...)
	return append(b, e.msg...)
}

func parsePeerFrame(b []byte) (seq uint64, tier string, msg []byte, err error) {
	if len(b) < 10 {
		return 0, "", nil, errors.New("relay: short peer frame")
	}
	seq = binary.BigEndian.Uint64(b)
	n := int(binary.BigEndian.Uint16(b[8:]))
	if len(b) < 10+n {
		return 0, "", nil, errors.New("relay: short peer frame")
	}
	tier = string(b[10 : 10+n])
	if err := ValidateTierKey(tier); err != nil {
		return 0, "", nil, fmt.Errorf("relay: peer frame: %w", err)
	}
	return seq, tier, b[10+n:], nil
}

// relayServer serves the Relay service for a Server.
type relayServer struct {
	r        *Relay
	auth     Authenticator
	ctx      context.Context // ends when Serve stops
	handlers *handlerSet
	log      *slog.Logger
}

// relayServiceDesc describes tiercache.relay.v1.Relay by hand (see the
// comment on relayService).
var relayServiceDesc = grpc.ServiceDesc{
	ServiceName: relayService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Publish",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return srv.(*relayServer).publish(ctx, in)
		},
	}},
	Streams: []grpc.StreamDesc{
		{StreamName: "Subscribe", ServerStreams: true, Handler: func(srv any, st grpc.ServerStream) error {
			if err := st.RecvMsg(new(emptypb.Empty)); err != nil {
				return err
			}
			return srv.(*relayServer).subscribe(st)
		}},
		{StreamName: "Peer", ServerStreams: true, Handler: func(srv any, st grpc.ServerStream) error {
			if err := st.RecvMsg(new(emptypb.Empty)); err != nil {
				return err
			}
			return srv.(*relayServer).peer(st)
		}},
	},
	Metadata: "tiercache/relay.go",
}

// identify authenticates a relay call as the xDS stream of the node its
// metadata names would be.
func (s *relayServer) identify(ctx context.Context) (Identity, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	node := &corev3.Node{Id: single(md.Get(RelayNodeKey)), Cluster: single(md.Get(RelayTierKey))}
	if node.Id == "" {
		return Identity{}, status.Error(codes.InvalidArgument, RelayNodeKey+" metadata: required (the sidecar's <namespace>/<pod>)")
	}
	if err := ValidateTierKey(node.Cluster); err != nil {
		return Identity{}, status.Errorf(codes.InvalidArgument, "%s metadata: %v", RelayTierKey, err)
	}
	if s.auth == nil {
		return Identity{Tier: node.Cluster}, nil
	}
	authCtx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	id, err := s.auth(authCtx, node)
	stop()
	cancel()
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
			return Identity{}, err
		}
		return Identity{}, status.Error(codes.Unauthenticated, err.Error())
	}
	if id.Tier != node.Cluster {
		return Identity{}, status.Errorf(codes.PermissionDenied, "%s %q: this credential is for tier %q", RelayTierKey, node.Cluster, id.Tier)
	}
	return id, nil
}

func single(v []string) string {
	if len(v) != 1 {
		return ""
	}
	return v[0]
}

func (s *relayServer) refuse(ctx context.Context, what string, err error) error {
	s.r.counter.WithLabelValues(relayRefused).Inc()
	s.log.Warn("relay: call refused", "call", what, "peer", peerAddr(ctx), "code", status.Code(err).String(), "reason", status.Convert(err).Message())
	return err
}

func (s *relayServer) publish(ctx context.Context, in *wrapperspb.BytesValue) (*emptypb.Empty, error) {
	if !s.handlers.enter() {
		return nil, status.Error(codes.Unavailable, "control plane shutting down")
	}
	defer s.handlers.exit()
	id, err := s.identify(ctx)
	if err != nil {
		return nil, s.refuse(ctx, "Publish", err)
	}
	if n := len(in.GetValue()); n == 0 || n > MaxRelayMessage {
		return nil, s.refuse(ctx, "Publish", status.Errorf(codes.InvalidArgument, "message: %d bytes, must be 1 to %d", n, MaxRelayMessage))
	}
	if err := s.r.deliver(id.Tier, in.GetValue(), true); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

func (s *relayServer) subscribe(st grpc.ServerStream) error {
	if !s.handlers.enter() {
		return status.Error(codes.Unavailable, "control plane shutting down")
	}
	defer s.handlers.exit()
	id, err := s.identify(st.Context())
	if err != nil {
		return s.refuse(st.Context(), "Subscribe", err)
	}
	sub, err := s.r.subscribe(id.Tier)
	if err != nil {
		return err
	}
	defer s.r.unsubscribe(id.Tier, sub)
	ctx := st.Context()
	hdr := metadata.Pairs(relaySubscribedKey, "true")
	if !id.Expires.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, id.Expires)
		defer cancel()
		hdr.Set(relayExpiresKey, strconv.FormatInt(id.Expires.UnixMilli(), 10))
	}
	// The header tells the sidecar it is subscribed: sent after the
	// subscription is in place.
	if err := st.SendHeader(hdr); err != nil {
		return err
	}
	for {
		select {
		case b := <-sub.q:
			if err := st.SendMsg(wrapperspb.Bytes(b)); err != nil {
				return err
			}
		case <-sub.kill:
			return status.Error(codes.Unavailable, "relay: this subscription fell behind or may have missed messages; resubscribe")
		case <-s.ctx.Done():
			return status.Error(codes.Unavailable, "control plane shutting down")
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return status.Error(codes.Unavailable, "the stream's credential is due for re-authentication: reconnect")
			}
			return ctx.Err()
		}
	}
}

func (s *relayServer) peer(st grpc.ServerStream) error {
	if !s.handlers.enter() {
		return status.Error(codes.Unavailable, "control plane shutting down")
	}
	defer s.handlers.exit()
	ctx := st.Context()
	if s.r.opts.PeerAuth == nil {
		return s.refuse(ctx, "Peer", status.Error(codes.PermissionDenied, "relay: this replica takes no peers"))
	}
	name, err := s.r.opts.PeerAuth(ctx)
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = status.Error(codes.Unauthenticated, err.Error())
		}
		return s.refuse(ctx, "Peer", err)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	epoch, seq := parseResume(single(md.Get(relayResumeKey)))
	sub, complete, err := s.r.subscribePeer(epoch, seq)
	if err != nil {
		return err
	}
	defer s.r.unsubscribePeer(sub)
	s.log.Debug("relay: peer subscribed", "peer", name, "complete", complete)
	if err := st.SendHeader(metadata.Pairs(relayEpochKey, strconv.FormatUint(s.r.epoch, 10), relayCompleteKey, strconv.FormatBool(complete))); err != nil {
		return err
	}
	// The peer presents its token again this often; it resumes where
	// this stream stopped, so nothing is lost meanwhile.
	reauth := time.NewTimer(s.r.opts.PeerReauth)
	defer reauth.Stop()
	for {
		select {
		case <-reauth.C:
			return status.Error(codes.Unavailable, "the stream's credential is due for re-authentication: reconnect")
		case b := <-sub.q:
			if err := st.SendMsg(wrapperspb.Bytes(b)); err != nil {
				return err
			}
		case <-sub.kill:
			return status.Error(codes.Unavailable, "relay: the peer fell behind; resubscribe")
		case <-sub.done:
			// Shutting down: send what is queued, then end cleanly.
			for {
				select {
				case b := <-sub.q:
					if err := st.SendMsg(wrapperspb.Bytes(b)); err != nil {
						return err
					}
				default:
					return nil
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// parseResume reads "<epoch>:<seq>"; anything else resumes nothing.
func parseResume(v string) (epoch, seq uint64) {
	for i := range len(v) {
		if v[i] == ':' {
			e, err1 := strconv.ParseUint(v[:i], 10, 64)
			s, err2 := strconv.ParseUint(v[i+1:], 10, 64)
			if err1 != nil || err2 != nil {
				return 0, 0
			}
			return e, s
		}
	}
	return 0, 0
}
