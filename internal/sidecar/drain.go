package sidecar

import (
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A pod leaves in this order: the kubelet runs the app container's preStop
// hook, then sends the app SIGTERM, and sends a native sidecar SIGTERM
// only once the app has exited. A sidecar that starts draining at its own
// SIGTERM is too late: while the app was alive its keep-alive clients,
// which kube-proxy pinned to this pod, kept their connections, and once
// the app is gone their misses fail. So the injector gives the app
// container a preStop hook that calls the sidecar's admin port (GET
// drainPath with the pod's drain token), and the sidecar drains while the
// app still answers:
//
//   - /readyz answers 503, so endpoints drop the pod;
//   - keep-alives are off on the serving port: idle connections are
//     closed, and every response says "Connection: close", so a pinned
//     client opens its next connection, which kube-proxy sends to a ready
//     pod once endpoints have updated;
//   - the hook's answer is held for the drain delay, so the kubelet sends
//     the app SIGTERM only after that; misses reach the app meanwhile.
//
// At its own SIGTERM the sidecar waits only what is left of the drain
// delay (nothing, after a hook), then shuts down. Without a hook (a pod
// whose app has its own preStop, or a sidecar run by hand) SIGTERM does
// all of the above and waits the whole delay.
//
// The kubelet also runs preStop hooks before it restarts a container
// whose liveness probe failed; the pod then stays. So a drain that no
// SIGTERM follows is undone: drainUndoAfter after its last hold ended,
// the sidecar is ready again and keeps connections alive.

const (
	// drainPath is the admin path of the preStop hook (the injector's
	// inject.DrainPath).
	drainPath = "/drain"
	// drainHoldHeader asks the hook to be held at least this long (a Go
	// duration, at most maxDrainHold): the injector sets it when the drain
	// hook replaces the app's own preStop sleep, so the app still lives as
	// long as that sleep asked (inject.DrainHoldHeader).
	drainHoldHeader = "X-Tiercache-Drain-Hold"
	// maxDrainHold is the longest hold a hook may ask for: --drain-delay's
	// own bound.
	maxDrainHold = 5 * time.Minute
	// drainUndoSlack is added to --drain-delay + --shutdown-timeout (the
	// pod's grace period, as the injector derives them) to get how long
	// after a hold a drain without SIGTERM is undone: any pod that is
	// really leaving has sent the sidecar SIGTERM by then.
	drainUndoSlack = 5 * time.Second
)

// keepAlives is the part of *http.Server the drain switches.
type keepAlives interface{ SetKeepAlivesEnabled(bool) }

// drainer is the sidecar's draining state. The zero value is not usable:
// see newDrainer.
type drainer struct {
	delay time.Duration
	// undoAfter is how long after its last hold a drain that no SIGTERM
	// followed is undone.
	undoAfter time.Duration
	token     string
	conns     keepAlives
	log       *slog.Logger

	// on is read by /readyz without the lock.
	on atomic.Bool

	mu    sync.Mutex
	since time.Time // when the current drain began
	final bool      // SIGTERM came: the drain is never undone
	holds int       // hooks being held
	// gen tells an undo timer that fired late from the current one.
	gen  uint64
	undo *time.Timer
}

func newDrainer(delay, shutdownTimeout time.Duration, token string, conns keepAlives, log *slog.Logger) *drainer {
	return &drainer{
		delay:     delay,
		undoAfter: delay + shutdownTimeout + drainUndoSlack,
		token:     token,
		conns:     conns,
		log:       log,
	}
}

// draining reports whether /readyz must fail.
func (d *drainer) draining() bool { return d.on.Load() }

// enterLocked starts draining unless it already is, and returns when the
// drain began.
func (d *drainer) enterLocked(now time.Time, why string) time.Time {
	d.gen++
	if d.undo != nil {
		d.undo.Stop()
		d.undo = nil
	}
	if d.on.Load() {
		return d.since
	}
	d.since = now
	d.on.Store(true)
	// Closes idle connections, and makes net/http answer every request
	// with "Connection: close" and close the connection after it.
	d.conns.SetKeepAlivesEnabled(false)
	d.log.Info("draining: not ready, closing client connections after each response", "reason", why, "drain_delay", d.delay.String())
	return now
}

// terminate is SIGTERM: drain for good, and return when the drain delay
// ends (in the past after a hook held the app for it).
func (d *drainer) terminate(now time.Time) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.final = true
	return d.enterLocked(now, "SIGTERM").Add(d.delay)
}

// hold starts draining for a hook and returns when its hold ends: the
// drain delay after the drain began, or atLeast after now if later.
func (d *drainer) hold(now time.Time, atLeast time.Duration) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.holds++
	end := d.enterLocked(now, "preStop hook").Add(d.delay)
	if e := now.Add(atLeast); e.After(end) {
		end = e
	}
	return end
}

// release ends a hook's hold; after the last one, the undo timer starts.
func (d *drainer) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.holds--
	if d.holds > 0 || d.final {
		return
	}
	gen := d.gen
	d.undo = time.AfterFunc(d.undoAfter, func() { d.expire(gen) })
}

// expire undoes a drain that no SIGTERM followed.
func (d *drainer) expire(gen uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.final || d.holds > 0 || gen != d.gen || !d.on.Load() {
		return
	}
	d.undo = nil
	d.on.Store(false)
	d.conns.SetKeepAlivesEnabled(true)
	d.log.Warn("drain undone: no SIGTERM followed the preStop hook (the kubelet restarted the app container?); ready again",
		"drained_for", time.Since(d.since).Round(time.Millisecond).String())
}

// stop ends the undo timer: the run is over.
func (d *drainer) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.final = true
	if d.undo != nil {
		d.undo.Stop()
		d.undo = nil
	}
}

// hook is the admin handler of drainPath. It needs "Authorization: Bearer
// <drain token>": anyone else who reaches the admin port could otherwise
// take the pod out of its Services. A sidecar without a token refuses
// every call. The answer is held until the drain delay has passed since
// the drain began (or the hold the hook asks for), the caller gives up, or
// the sidecar stops (ctx).
func (d *drainer) hook(ctx context.Context) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "drain: use GET (the kubelet's preStop httpGet) or POST", http.StatusMethodNotAllowed)
			return
		}
		if d.token == "" {
			http.Error(w, "drain: this sidecar has no drain token (--drain-token or TIERCACHE_DRAIN_TOKEN), so no caller may drain it; it drains at SIGTERM", http.StatusForbidden)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(d.token)) != 1 {
			http.Error(w, "drain: the pod's drain token is required as \"Authorization: Bearer <token>\"", http.StatusForbidden)
			return
		}
		var atLeast time.Duration
		if v := r.Header.Get(drainHoldHeader); v != "" {
			var err error
			if atLeast, err = time.ParseDuration(v); err != nil || atLeast < 0 || atLeast > maxDrainHold {
				http.Error(w, fmt.Sprintf("drain: header %s: %q is not a duration between 0s and %s", drainHoldHeader, v, maxDrainHold), http.StatusBadRequest)
				return
			}
		}
		end := d.hold(time.Now(), atLeast)
		defer d.release()
		t := time.NewTimer(time.Until(end))
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-ctx.Done():
		}
		_, _ = io.WriteString(w, "drained\n")
	})
}
