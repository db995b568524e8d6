package operator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/controlplane"
	"github.com/tiercache/tiercache/internal/operator/render"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// xdsPublisher adapts the control-plane server to the controller's
// Publisher.
type xdsPublisher struct{ srv *controlplane.Server }

func (p xdsPublisher) Publish(ctx context.Context, key string, c tierconfig.Config) error {
	_, _, err := p.srv.Publish(ctx, key, c)
	return err
}
func (p xdsPublisher) Clear(key string)         { p.srv.Clear(key) }
func (p xdsPublisher) Connected(key string) int { return p.srv.Connected(key) }

// xdsRunnable serves the control plane on every replica: sidecars may
// connect to any of them, so none needs to lead. With TLS it waits for the
// certificate (ready: the self-managed one is written after start) and
// then watches its files, so that a renewed certificate is served without
// a restart.
type xdsRunnable struct {
	srv   *controlplane.Server
	ln    net.Listener
	ready <-chan struct{}
	// certFile and keyFile ("" = plaintext) fill cert.
	certFile, keyFile string
	cert              *atomic.Pointer[certwatcher.CertWatcher]
}

func (x xdsRunnable) NeedLeaderElection() bool { return false }

func (x xdsRunnable) Start(ctx context.Context) error {
	defer x.ln.Close()
	select {
	case <-x.ready:
	case <-ctx.Done():
		return nil
	}
	if x.certFile != "" {
		w, err := certwatcher.New(x.certFile, x.keyFile)
		if err != nil {
			return fmt.Errorf("xds TLS certificate: %w", err)
		}
		x.cert.Store(w)
		watchCtx, stopWatch := context.WithCancel(ctx)
		watched := make(chan error, 1)
		go func() { watched <- w.Start(watchCtx) }()
		defer func() {
			stopWatch()
			<-watched
		}()
	}
	err := x.srv.Serve(ctx, x.ln)
	if errors.Is(err, controlplane.ErrShutdownTimeout) {
		// The streams were closed hard; that is the end of shutdown.
		return nil
	}
	return err
}

// setupControlPlane starts the xDS server (unless --xds-listen is empty)
// and returns the Publisher the controllers use and the leader's reader
// of the replicas' sidecar reports. This replica reports its own
// sidecars (sidecarReporter); NACKs become Events on the tier (from
// whichever replica heard them). certReady is closed once the webhook
// certificate files exist (with TLS, xDS serves from then on).
func setupControlPlane(mgr manager.Manager, o Options, reg prometheus.Registerer, log *slog.Logger, rec events.EventRecorder, certReady <-chan struct{}) (Publisher, *sidecarReports, error) {
	if o.XDSListen == "" {
		return NoPublisher{}, nil, nil
	}
	run := xdsRunnable{ready: certReady, cert: &atomic.Pointer[certwatcher.CertWatcher]{}}
	var grpcOpts []grpc.ServerOption
	if o.XDSTLS {
		run.certFile, run.keyFile = o.xdsCertFiles()
		cert := run.cert
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(&tls.Config{
			MinVersion: tls.VersionTLS12,
			GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
				w := cert.Load()
				if w == nil {
					return nil, errors.New("xds TLS certificate not loaded yet")
				}
				return w.GetCertificate(hello)
			},
		})))
	} else {
		log.Warn("xds: serving the control plane in plaintext (--xds-tls=false): sidecar tokens and tier configs cross the network unencrypted")
	}
	var authenticate controlplane.Authenticator
	switch o.XDSAuth {
	case XDSAuthNone:
		log.Warn("xds: NOT AUTHENTICATING SIDECARS (--xds-auth=none): any client that reaches the control plane gets the config of any tier it names; use only for development")
	default:
		a, err := newTokenAuthenticator(mgr.GetClient(), mgr.GetClient(), o.XDSTokenAudience, reg)
		if err != nil {
			return nil, nil, err
		}
		authenticate = a.Authenticate
	}
	relay, err := newRelay(mgr, o, reg, log)
	if err != nil {
		return nil, nil, err
	}
	// changed has room for one signal: changes coalesce until the
	// reporter writes.
	changed := make(chan struct{}, 1)
	srv, err := controlplane.NewServer(controlplane.Options{
		Logger:       log,
		Registerer:   reg,
		GRPCOptions:  grpcOpts,
		Authenticate: authenticate,
		Relay:        relay,
		OnChange: func(string) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
		OnNACK: func(n controlplane.NACK) {
			ns, name, ok := strings.Cut(n.Tier, "/")
			if !ok {
				return
			}
			var tier v1alpha1.CacheTier
			// The Event needs the tier's UID; the cache has it.
			if err := mgr.GetClient().Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &tier); err == nil {
				rec.Eventf(&tier, nil, corev1.EventTypeWarning, v1alpha1.ReasonConfigRejected, "Apply",
					"sidecar %s refused config version %.12s: %s", n.Node, n.Version, n.Message)
			}
		},
	})
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", o.XDSListen)
	if err != nil {
		return nil, nil, fmt.Errorf("--xds-listen: %w", err)
	}
	run.srv, run.ln = srv, ln
	if err := mgr.Add(run); err != nil {
		ln.Close()
		return nil, nil, err
	}
	if o.RelayPeers != "" {
		sel, _ := labels.Parse(o.RelayPeers) // checked by Options
		_, port, err := net.SplitHostPort(o.XDSListen)
		if err != nil {
			return nil, nil, fmt.Errorf("--xds-listen: %w", err)
		}
		if err := mgr.Add(relayRunnable{relay: relay, ready: certReady, o: o, log: log,
			peers: relayPeers{pods: mgr.GetAPIReader(), ns: o.Namespace, self: o.ReplicaName, selector: sel, port: port}}); err != nil {
			return nil, nil, err
		}
	}
	if err := mgr.Add(&sidecarReporter{
		c: mgr.GetClient(), pods: mgr.GetAPIReader(), ns: o.Namespace, replica: o.ReplicaName,
		every: o.StatusRefresh, minGap: o.reportMinGap(),
		sidecars: srv.Sidecars, changed: changed, log: log, now: time.Now,
	}); err != nil {
		return nil, nil, err
	}
	reports := newSidecarReports(mgr.GetClient(), mgr.GetClient(), o.Namespace, o.StatusRefresh, log)
	reports.pods = mgr.GetAPIReader()
	if err := mgr.Add(reportJanitor{reports}); err != nil {
		return nil, nil, err
	}
	return xdsPublisher{srv}, reports, nil
}

// newRelay returns this replica's invalidation relay. Peers are admitted
// with the operator's own ServiceAccount token (TokenReview), or, with
// --xds-auth=none, unchecked.
func newRelay(mgr manager.Manager, o Options, reg prometheus.Registerer, log *slog.Logger) (*controlplane.Relay, error) {
	ro := controlplane.RelayOptions{Logger: log, Registerer: reg}
	switch {
	case o.RelayPeers == "":
	case o.XDSAuth == XDSAuthNone:
		ro.PeerAuth = func(context.Context) (string, error) { return "unauthenticated peer", nil }
	default:
		tok, err := relayToken(o.RelayTokenFile)()
		if err != nil {
			return nil, err
		}
		user, err := serviceAccountUser(tok)
		if err != nil {
			return nil, fmt.Errorf("--relay-token-file: %w", err)
		}
		ro.PeerAuth = newPeerAuthenticator(mgr.GetClient(), user).Authenticate
	}
	return controlplane.NewRelay(ro)
}

// PublishReconciler runs on every replica (not only the leader): it
// renders each tier and publishes it to this replica's control plane, and
// clears it when the tier is deleted. A tier that is not valid any more
// publishes nothing: its sidecars keep the last valid config. Status is
// the leader's TierReconciler's job.
type PublishReconciler struct {
	Client    client.Client
	APIReader client.Reader
	Publisher Publisher
}

// Reconcile implements reconcile.Reconciler.
func (r *PublishReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	tier, err := liveTier(ctx, r.Client, req, r.Publisher)
	if tier == nil || err != nil {
		return reconcile.Result{}, err
	}
	cfg, err := render.Config(ctx, tier, secretLookup{cache: r.Client})
	switch {
	case render.Transient(err):
		return reconcile.Result{}, err // retry
	case err != nil:
		// Not valid: sidecars keep the last valid config (the status
		// controller says so); nothing to publish.
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, r.Publisher.Publish(ctx, req.Namespace+"/"+req.Name, cfg)
}

// SetupWithManager registers the publishing controller with the same
// watches as the status controller (the secret index is shared).
func (r *PublishReconciler) SetupWithManager(mgr ctrl.Manager, secretToTiers handler.EventHandler) error {
	notLeader := false
	return ctrl.NewControllerManagedBy(mgr).
		Named("cachetier-publish").
		For(&v1alpha1.CacheTier{}).
		Watches(&corev1.Secret{}, secretToTiers, builder.OnlyMetadata).
		WithOptions(controller.Options{NeedLeaderElection: &notLeader}).
		Complete(r)
}
