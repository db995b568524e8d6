package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tiercache/tiercache/internal/backoff"
)

// Peer is another replica of this operator.
type Peer struct {
	// Name tells replicas apart (the pod's name); Addr is its control
	// plane's gRPC address.
	Name, Addr string
}

// PeerOptions configure RunPeers.
type PeerOptions struct {
	// Peers lists the other replicas (this one left out). Required.
	Peers func(ctx context.Context) ([]Peer, error)
	// Every is how often Peers is called (default 5s).
	Every time.Duration
	// DialOptions are added after the default (plaintext): TLS here.
	DialOptions []grpc.DialOption
	// Token returns the bearer token presented to peers (their
	// PeerAuthenticator checks it); nil presents none.
	Token func() (string, error)
	// Backoff between reconnections to one peer.
	Backoff Backoff
}

// RunPeers receives, from every other replica, the messages their
// sidecars publish, and hands them to this replica's sidecars, until ctx
// ends. Each peer's stream resumes where the last one ended (the peer
// replays what it logged meanwhile); when it cannot (the peer's log lost
// some, or they are too old for sidecars to accept), or a peer stays
// unreachable for longer than a replay can cover, or is gone while
// unreachable, every sidecar subscription here is ended: the sidecars
// resubscribe and clear their L1, as after any lost subscription. A
// peer that shut down cleanly (its stream ended without an error, after
// everything was sent) costs nothing.
func (r *Relay) RunPeers(ctx context.Context, o PeerOptions) error {
	if o.Peers == nil {
		return errors.New("controlplane relay: peers: required")
	}
	if o.Every <= 0 {
		o.Every = 5 * time.Second
	}
	o.Backoff = o.Backoff.withDefaults()
	if err := o.Backoff.validate(); err != nil {
		return fmt.Errorf("controlplane relay: %w", err)
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, o.DialOptions...)
	links := map[Peer]*peerLink{}
	var wg sync.WaitGroup
	defer func() {
		for _, l := range links {
			l.cancel()
		}
		wg.Wait()
	}()
	t := time.NewTicker(o.Every)
	defer t.Stop()
	for {
		peers, err := o.Peers(ctx)
		if err != nil {
			r.log.Warn("relay: listing the other replicas failed; keeping the known ones", "err", err)
		} else {
			seen := make(map[Peer]bool, len(peers))
			for _, p := range peers {
				seen[p] = true
				if links[p] == nil {
					lctx, cancel := context.WithCancel(ctx)
					l := &peerLink{r: r, peer: p, o: o, dial: dial, cancel: cancel, brokenSince: r.opts.Now()}
					links[p] = l
					wg.Add(1)
					go func() { defer wg.Done(); l.run(lctx) }()
				}
			}
			for p, l := range links {
				if !seen[p] {
					l.cancel()
					delete(links, p)
					if l.owes() {
						r.kickAll("replica " + p.Name + " is gone while unreachable: messages published there may have been missed")
					}
				}
			}
		}
		for p, l := range links {
			if l.overdue() {
				r.kickAll("replica " + p.Name + " unreachable for longer than a replay covers")
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// peerLink receives one peer's messages.
type peerLink struct {
	r      *Relay
	peer   Peer
	o      PeerOptions
	dial   []grpc.DialOption
	cancel context.CancelFunc

	mu sync.Mutex
	// epoch and seq are the last entry of the peer's log received.
	epoch, seq uint64
	// up: a stream is open; clean: the last one ended without an error
	// (the peer stopped after sending everything).
	up, clean bool
	// brokenSince is when the link went down (or began); kicked is set
	// once the sidecars were ended for this outage.
	brokenSince time.Time
	kicked      bool
}

// owes reports whether messages of the peer may not have reached this
// replica's sidecars, who were not told.
func (l *peerLink) owes() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.up && !l.clean && !l.kicked
}

// overdue reports, once per outage, that the peer has been unreachable
// for longer than its replay can cover.
func (l *peerLink) overdue() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.up || l.clean || l.kicked || l.r.opts.Now().Sub(l.brokenSince) < maxReplayAge {
		return false
	}
	l.kicked = true
	return true
}

func (l *peerLink) run(ctx context.Context) {
	attempt := 0
	for {
		progressed, err := l.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if progressed {
			attempt = 0
		}
		if err != nil {
			l.r.log.Info("relay: stream from peer ended, reconnecting", "peer", l.peer.Name, "addr", l.peer.Addr, "err", err)
		}
		d := l.o.Backoff.Delay(attempt, rand.Float64())
		attempt++
		if !backoff.Sleep(ctx, d) {
			return
		}
	}
}

func (l *peerLink) session(ctx context.Context) (progressed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l.mu.Lock()
	resume := strconv.FormatUint(l.epoch, 10) + ":" + strconv.FormatUint(l.seq, 10)
	l.mu.Unlock()
	ctx = metadata.AppendToOutgoingContext(ctx, relayResumeKey, resume)
	if l.o.Token != nil {
		tok, err := l.o.Token()
		if err != nil {
			return false, err
		}
		ctx = metadata.AppendToOutgoingContext(ctx, AuthorizationKey, "Bearer "+tok)
	}
	conn, err := grpc.NewClient(l.peer.Addr, l.dial...)
	if err != nil {
		return false, fmt.Errorf("dial %s: %w", l.peer.Addr, err)
	}
	defer conn.Close()
	st, err := conn.NewStream(ctx, &relayServiceDesc.Streams[1], "/"+relayService+"/Peer")
	if err != nil {
		return false, err
	}
	if err := st.SendMsg(&emptypb.Empty{}); err != nil {
		return false, err
	}
	if err := st.CloseSend(); err != nil {
		return false, err
	}
	hdr, err := st.Header()
	if err != nil {
		return false, err
	}
	if len(hdr.Get(relayEpochKey)) == 0 {
		// Ended without a header: its status says why.
		return false, st.RecvMsg(new(wrapperspb.BytesValue))
	}
	epoch, err := strconv.ParseUint(single(hdr.Get(relayEpochKey)), 10, 64)
	if err != nil {
		return false, fmt.Errorf("relay: peer header %s: %w", relayEpochKey, err)
	}
	complete := single(hdr.Get(relayCompleteKey)) == "true"
	l.mu.Lock()
	// A peer whose log is another one than before, after a stream that
	// did not end cleanly, is a restarted process: what its predecessor
	// took and had not sent is lost.
	restarted := l.epoch != 0 && epoch != l.epoch && !l.clean
	if epoch != l.epoch || !complete {
		l.epoch, l.seq = epoch, 0
	}
	// An outage already paid for by a kick needs no other.
	kick := (!complete || restarted) && !l.kicked
	l.up, l.clean, l.kicked = true, false, false
	l.mu.Unlock()
	if kick {
		l.r.kickAll("replica " + l.peer.Name + " could not replay every message published there meanwhile (restarted, or its log lost some)")
	}
	defer func() {
		l.mu.Lock()
		l.up, l.clean = false, errors.Is(err, io.EOF)
		l.brokenSince = l.r.opts.Now()
		l.mu.Unlock()
		if errors.Is(err, io.EOF) {
			err = nil
		}
	}()
	for {
		in := new(wrapperspb.BytesValue)
		if err := st.RecvMsg(in); err != nil {
			return true, err
		}
		progressed = true
		seq, tier, msg, err := parsePeerFrame(in.GetValue())
		if err != nil {
			return true, err
		}
		l.mu.Lock()
		// After a complete resume or a fresh log the entries follow one
		// another; the first one after an incomplete one (already paid
		// for) starts anywhere.
		gap := l.seq != 0 && seq != l.seq+1
		l.seq = seq
		l.mu.Unlock()
		if gap {
			l.r.kickAll("replica " + l.peer.Name + " skipped messages")
		}
		if err := l.r.deliver(tier, msg, false); err != nil {
			return true, err
		}
	}
}
