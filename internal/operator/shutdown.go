package operator

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// A replica that stops at once on SIGTERM fails pod admissions: the
// webhook Service's endpoints, kube-proxy's rules and the API server's
// pooled (HTTP/2) connection to the replica still point at it for a few
// seconds, and a call sent there hangs until the webhook's timeoutSeconds
// (about one pod create in 120 during a rollout, measured). So, like
// kube-apiserver's --shutdown-delay-duration, a replica first says it is
// leaving and keeps serving:
//
//   - /readyz fails, so endpoints drop the replica even where a pod's
//     deletion alone would not (a SIGTERM from elsewhere);
//   - every webhook answer closes its connection ("Connection: close"; on
//     HTTP/2 net/http sends GOAWAY), so the API server's next call opens a
//     new one, which kube-proxy sends to a ready replica once endpoints
//     have updated, and reaches this one, still serving, until then;
//   - the xDS server, the controllers and leader election run on, so
//     sidecars keep their stream until the end and reconnect when the
//     Service no longer names this replica;
//
// and after --shutdown-delay the manager stops: the webhook server shuts
// down gracefully (in-flight admissions finish, idle connections get
// GOAWAY), the leader Lease is released, and the sidecar report deleted.

const (
	// DefaultShutdownDelay is --shutdown-delay's default: endpoint
	// updates and kube-proxy's resync take a few seconds on a busy
	// control plane.
	DefaultShutdownDelay = 10 * time.Second
	maxShutdownDelay     = 5 * time.Minute
	// ManagerStopTimeout bounds the manager's own graceful stop after the
	// delay (controller-runtime's default is 30s): in-flight admissions
	// (timeoutSeconds at most 30, 10 in the chart), the xDS server's stop,
	// the Lease release. The chart's terminationGracePeriodSeconds is the
	// delay + 20s, which covers it.
	ManagerStopTimeout = 15 * time.Second
)

// leaving is set once the replica has been told to stop.
type leaving struct{ on atomic.Bool }

// readyz is the manager's readiness check "shutdown".
func (l *leaving) readyz(*http.Request) error {
	if l.on.Load() {
		return errors.New("shutting down")
	}
	return nil
}

// closeConns makes every answer of next close its connection once the
// replica is leaving.
func (l *leaving) closeConns(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l.on.Load() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// runLeaving runs start until it returns. When ctx ends, l is set at once
// and start's own context ends delay later (or when start returns). The
// context start gets keeps ctx's values.
func runLeaving(ctx context.Context, delay time.Duration, l *leaving, log logr.Logger, start func(context.Context) error) error {
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	returned := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(returned)
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
		case <-returned:
			return
		}
		l.on.Store(true)
		log.Info("shutting down: not ready, webhooks and xDS keep serving for the shutdown delay", "delay", delay.String())
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-returned:
		}
		stop()
	}()
	return start(runCtx)
}
