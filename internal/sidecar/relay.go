package sidecar

import (
	"context"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tiercache/tiercache/internal/controlplane"
	"github.com/tiercache/tiercache/internal/invalidate"
)

// relayRemote is the purger's channel for a tier without L2: the control
// plane's invalidation relay (controlplane.RelayClient). There is no
// shared store (Purge and Forget are never called: Purger.SetRelay) and
// no sequence the sidecar could read: Seq reports none, so every
// resubscription after the first clears L1 (Purger.Subscribed), as on
// L2 when the counter is gone.
type relayRemote struct{ c *controlplane.RelayClient }

func (relayRemote) Purge(context.Context, invalidate.Selector, invalidate.Mode) (int, error) {
	return 0, nil
}
func (relayRemote) Forget(invalidate.Selector)                      {}
func (r relayRemote) Publish(ctx context.Context, msg []byte) error { return r.c.Publish(ctx, msg) }
func (relayRemote) NextSeq(context.Context) (uint64, error)         { return 0, nil }
func (relayRemote) Seq(context.Context) (uint64, bool, error)       { return 0, false, nil }

// relayChannel is the name the MACs of a tier's relayed messages cover:
// never a Redis channel's name, so that a message signed for one is
// refused on the other.
func relayChannel(o Options) string { return "tiercache-relay:" + o.PodNamespace + "/" + o.Tier }

// newRelayClient connects to the control plane's relay as the xDS client
// does (same address, TLS and token).
func newRelayClient(o Options, log *slog.Logger) (*controlplane.RelayClient, error) {
	opts := controlplane.RelayClientOptions{
		Target: o.ControlPlane, Namespace: o.PodNamespace, Pod: o.PodName, Tier: o.Tier,
		TokenFile: o.ControlPlaneTokenFile, Logger: log,
	}
	dial, err := controlPlaneDialOptions(o)
	if err != nil {
		return nil, err
	}
	opts.DialOptions = dial
	return controlplane.NewRelayClient(opts)
}

// subscribeRelay follows the tier's relayed invalidations for a
// generation: subscribed is closed at the first subscription; every
// later one follows a lost one (L1 is cleared: Purger.Subscribed) and is
// counted in lost. The
// goroutine is owned by wg and ends with ctx.
func subscribeRelay(ctx context.Context, wg *sync.WaitGroup, c *controlplane.RelayClient, purger *invalidate.Purger,
	subscribed chan struct{}, lost prometheus.Counter, log *slog.Logger) {
	subscribeInvalidations(ctx, wg, c.Subscribe, purger, subscribed, lost, log, "relayed invalidation subscription ended")
}
