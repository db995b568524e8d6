package controlplane

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tiercache/tiercache/internal/backoff"
)

// RelayClientOptions configure a RelayClient: the control plane and the
// sidecar's identity, as for the config Client.
type RelayClientOptions struct {
	// Target, Namespace, Pod, Tier, TokenFile and DialOptions are
	// ClientOptions'. Required: Target, Namespace, Pod, Tier.
	Target, Namespace, Pod, Tier string
	TokenFile                    string
	DialOptions                  []grpc.DialOption
	// PublishTimeout bounds a Publish (default 2s).
	PublishTimeout time.Duration
	// RenewBefore is how long before the server ends a subscription for
	// re-authentication the next one is opened (default 1m, at most half
	// the subscription's life).
	RenewBefore time.Duration
	Backoff     Backoff
	Logger      *slog.Logger
}

// RelayClient is a sidecar's end of the invalidation relay (relay.go):
// it publishes the tier's sealed messages and receives the others'.
type RelayClient struct {
	opts RelayClientOptions
	log  *slog.Logger
	conn *grpc.ClientConn
	node string
	tier string
}

// NewRelayClient checks opts and returns a RelayClient; it connects
// lazily. Close releases it.
func NewRelayClient(opts RelayClientOptions) (*RelayClient, error) {
	errs := checkPeer("relay client", opts.Target, opts.Namespace, opts.Pod, opts.Tier)
	opts.Backoff = opts.Backoff.withDefaults()
	if err := opts.Backoff.validate(); err != nil {
		errs = append(errs, fmt.Errorf("relay client: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.PublishTimeout <= 0 {
		opts.PublishTimeout = 2 * time.Second
	}
	if opts.RenewBefore <= 0 {
		opts.RenewBefore = time.Minute
	}
	conn, err := grpc.NewClient(opts.Target, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}, opts.DialOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("relay client: dial %s: %w", opts.Target, err)
	}
	return &RelayClient{opts: opts, log: opts.Logger, conn: conn,
		node: opts.Namespace + "/" + opts.Pod, tier: opts.Namespace + "/" + opts.Tier}, nil
}

// Close closes the connection; calls in progress fail.
func (c *RelayClient) Close() error { return c.conn.Close() }

// outgoing adds the sidecar's identity and token to ctx.
func (c *RelayClient) outgoing(ctx context.Context) (context.Context, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, RelayNodeKey, c.node, RelayTierKey, c.tier)
	if c.opts.TokenFile != "" {
		tok, err := readToken(c.opts.TokenFile)
		if err != nil {
			return nil, err
		}
		ctx = metadata.AppendToOutgoingContext(ctx, AuthorizationKey, "Bearer "+tok)
	}
	return ctx, nil
}

// Publish sends msg to every sidecar of the tier, bounded by ctx and
// PublishTimeout. A replica that is unavailable (shutting down, its
// connection lost) is tried again, up to publishAttempts times: the
// connection then goes to another replica.
func (c *RelayClient) Publish(ctx context.Context, msg []byte) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.PublishTimeout)
	defer cancel()
	ctx, err := c.outgoing(ctx)
	if err != nil {
		return fmt.Errorf("relay publish: %w", err)
	}
	for attempt := 1; ; attempt++ {
		err = c.conn.Invoke(ctx, "/"+relayService+"/Publish", wrapperspb.Bytes(msg), new(emptypb.Empty))
		if err == nil {
			return nil
		}
		if status.Code(err) != codes.Unavailable || attempt == publishAttempts || !backoff.Sleep(ctx, time.Duration(attempt)*50*time.Millisecond) {
			return fmt.Errorf("relay publish: %w", err)
		}
	}
}

// publishAttempts bounds the tries of one Publish.
const publishAttempts = 3

// Subscribe receives the tier's messages until ctx ends, and returns
// ctx.Err(); its contract is l2.Client.Subscribe's: onSubscribed is
// called after every (re)subscription with the time just before it was
// asked for, onMessage with each message, both on Subscribe's goroutine.
//
// A subscription the server will end for re-authentication (its
// credential's expiry, sent in the header) is replaced before it ends:
// the next one is opened first, with the token as it is then, and the
// old one closed once the new one is in place, so no message falls
// between them and onSubscribed is not called: it is the same
// subscription. A message that arrives on both is passed on once.
// Subscribe may run more than once at a time (a sidecar's generations
// during a handover), each call its own subscription.
func (c *RelayClient) Subscribe(ctx context.Context, onMessage func([]byte), onSubscribed func(since time.Time)) error {
	attempt := 0
	for {
		since := time.Now()
		cur, err := c.open(ctx)
		if err == nil {
			attempt = 0
			onSubscribed(since)
			err = c.follow(ctx, cur, &recentSet{max: 1024}, onMessage)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.log.Info("relay: invalidation subscription ended, resubscribing", "target", c.opts.Target, "err", err)
		d := c.opts.Backoff.Delay(attempt, rand.Float64())
		attempt++
		if !backoff.Sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// relayStream is one open subscription; its reader sends what it
// receives to msgs and, at its end, the error to done.
type relayStream struct {
	cancel  context.CancelFunc
	expires time.Time // zero: never
	msgs    chan []byte
	done    chan error
}

// open subscribes and returns once the server has the subscription in
// place (its header came).
func (c *RelayClient) open(ctx context.Context) (*relayStream, error) {
	sctx, cancel := context.WithCancel(ctx)
	octx, err := c.outgoing(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	st, err := c.conn.NewStream(octx, &relayServiceDesc.Streams[0], "/"+relayService+"/Subscribe")
	if err == nil {
		err = st.SendMsg(&emptypb.Empty{})
	}
	if err == nil {
		err = st.CloseSend()
	}
	var hdr metadata.MD
	if err == nil {
		hdr, err = st.Header()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	if single(hdr.Get(relaySubscribedKey)) != "true" {
		// No header: the stream ended before the subscription.
		err := st.RecvMsg(new(wrapperspb.BytesValue))
		cancel()
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	s := &relayStream{cancel: cancel, msgs: make(chan []byte), done: make(chan error, 1)}
	if ms, err := strconv.ParseInt(single(hdr.Get(relayExpiresKey)), 10, 64); err == nil {
		s.expires = time.UnixMilli(ms)
	}
	go func() {
		for {
			in := new(wrapperspb.BytesValue)
			if err := st.RecvMsg(in); err != nil {
				s.done <- err
				return
			}
			select {
			case s.msgs <- in.GetValue():
			case <-sctx.Done():
				s.done <- sctx.Err()
				return
			}
		}
	}()
	return s, nil
}

// follow passes on cur's messages, replacing it before it expires, until
// the subscription is lost (the error) or ctx ends. A replaced stream is
// followed too until the server ends it: a message that was on its way
// to it when the next one was in place is not lost.
func (c *RelayClient) follow(ctx context.Context, cur *relayStream, recent *recentSet, onMessage func([]byte)) error {
	var old *relayStream // the one replaced, until it ends
	defer func() {
		cur.cancel()
		if old != nil {
			old.cancel()
		}
	}()
	renew := time.NewTimer(0)
	defer renew.Stop()
	schedule := func() {
		renew.Stop()
		if !cur.expires.IsZero() {
			life := time.Until(cur.expires)
			renew.Reset(max(life-min(c.opts.RenewBefore, life/2), 0))
		}
	}
	schedule()
	for {
		var oldMsgs <-chan []byte
		var oldDone <-chan error
		if old != nil {
			oldMsgs, oldDone = old.msgs, old.done
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case b := <-cur.msgs:
			if recent.add(b) {
				onMessage(b)
			}
		case b := <-oldMsgs:
			if recent.add(b) {
				onMessage(b)
			}
		case <-oldDone:
			old.cancel()
			old = nil
		case err := <-cur.done:
			return err
		case <-renew.C:
			next, err := c.open(ctx)
			if err != nil {
				c.log.Info("relay: renewing the invalidation subscription failed; the current one goes on until it ends", "err", err)
				renew.Reset(min(5*time.Second, max(time.Until(cur.expires)/4, 10*time.Millisecond)))
				continue
			}
			if old != nil {
				// Overlapped by cur for all of cur's life: nothing on
				// its way to it is still missing from cur.
				old.cancel()
			}
			old, cur = cur, next
			schedule()
		}
	}
}

// recentSet remembers the digests of the last max messages passed on,
// so that one received on two subscriptions (a renewal's overlap) is
// passed on once.
type recentSet struct {
	max   int
	seen  map[[sha256.Size]byte]struct{}
	order [][sha256.Size]byte
}

func (r *recentSet) add(b []byte) bool {
	h := sha256.Sum256(b)
	if _, ok := r.seen[h]; ok {
		return false
	}
	if r.seen == nil {
		r.seen = make(map[[sha256.Size]byte]struct{}, r.max)
	}
	if len(r.order) >= r.max {
		delete(r.seen, r.order[0])
		r.order = r.order[1:]
	}
	r.seen[h] = struct{}{}
	r.order = append(r.order, h)
	return true
}
