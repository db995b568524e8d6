package sidecar

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/store"
	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// subscribeAndPreload subscribes to the tier's invalidations and, once
// subscribed (so that nothing purged during the preload is missed),
// preloads L1 from L2 (warm start). ready is set when the preload has
// ended, successfully or not, bounded by the warm-start timeout;
// subscribed is closed at the first subscription. Both goroutines are
// owned by wg and end with ctx. Every subscription after the first
// follows a lost one (messages may have been missed; L1 is cleared unless
// the sequence shows none was): it is counted as
// l2_errors_total{op="subscribe"}.
func subscribeAndPreload(ctx context.Context, wg *sync.WaitGroup, client *l2.Client, st *store.Layered,
	purger *invalidate.Purger, ws tierconfig.WarmStart, ready *atomic.Bool, subscribed chan struct{},
	lost prometheus.Counter, log *slog.Logger) {
	subscribeInvalidations(ctx, wg, client.Subscribe, purger, subscribed, lost, log, "invalidation subscription ended")
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer ready.Store(true)
		if ws.Disabled {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, ws.Timeout.Std())
		defer cancel()
		select {
		case <-subscribed:
		case <-wctx.Done():
			if ctx.Err() == nil { // not shutting down: the timeout passed
				log.Warn("warm start skipped: not subscribed to invalidations in time", "timeout", ws.Timeout.String())
			}
			return
		}
		n, err := st.WarmStart(wctx, ws.MaxEntries, int64(ws.MaxBytes))
		if err != nil {
			log.Warn("warm start ended early", "loaded", n, "err", err)
			return
		}
		log.Info("warm start", "loaded", n)
	}()
}

// subscribeInvalidations runs subscribe (L2's or the relay's) in a
// goroutine owned by wg, until ctx ends: its messages go to purger, each
// (re)subscription is reported to purger, the first closes subscribed,
// and each after the first (one was lost) counts in lost. An end other
// than ctx's is logged as ended.
func subscribeInvalidations(ctx context.Context, wg *sync.WaitGroup,
	subscribe func(ctx context.Context, onMessage func([]byte), onSubscribed func(since time.Time)) error,
	purger *invalidate.Purger, subscribed chan struct{}, lost prometheus.Counter, log *slog.Logger, ended string) {
	var once sync.Once
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := subscribe(ctx, purger.HandleMessage, func(since time.Time) {
			purger.Subscribed(ctx, since)
			first := false
			once.Do(func() { first = true; close(subscribed) })
			if !first {
				lost.Inc()
			}
		})
		if err != nil && ctx.Err() == nil {
			log.Error(ended, "err", err)
		}
	}()
}
