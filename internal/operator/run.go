// Package operator wires the Tiercache operator: the CacheTier controller
// (render → publish → status), the Pod injection and CacheTier validation
// webhooks, and their serving certificate (self-managed with
// open-policy-agent/cert-controller, or mounted by cert-manager).
// cmd/operator only calls Run, so tests drive the whole process against
// envtest's API server with their own arguments.
package operator

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"

	"github.com/go-logr/logr"
	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	tcversion "github.com/tiercache/tiercache/internal/version"
)

// Env is what Run takes from its surroundings.
type Env struct {
	Getenv func(string) string
	// Stdout takes what --version prints; nil = Stderr.
	Stdout io.Writer
	Stderr io.Writer
	// RestConfig reaches the API server; nil = controller-runtime's
	// lookup (--kubeconfig, $KUBECONFIG, in-cluster).
	RestConfig *rest.Config
	// Publisher delivers rendered configs; nil = NoPublisher.
	Publisher Publisher
	// CertExtraDNSNames are added to a self-managed serving certificate
	// (tests reach the webhook on localhost).
	CertExtraDNSNames []string
	// Registerer takes the operator's own metrics
	// (tiercache_connected_sidecars); nil = controller-runtime's registry,
	// served on --metrics-bind-address.
	Registerer prometheus.Registerer
	// SkipNameValidation lets tests run several operators in one process
	// (controller names are otherwise process-wide unique).
	SkipNameValidation bool
}

// Run runs the operator until ctx is cancelled. It also points the
// process-wide loggers of controller-runtime and client-go (klog) at
// stderr, which RunWith must not do: they are not safe to set while
// another operator in the process runs.
func Run(ctx context.Context, args []string) error {
	log := newLogger(os.Stderr)
	ctrl.SetLogger(log)
	klog.SetLogger(log)
	return RunWith(ctx, args, Env{Getenv: os.Getenv, Stdout: os.Stdout, Stderr: os.Stderr})
}

// newLogger logs JSON lines to w.
func newLogger(w io.Writer) logr.Logger {
	return logr.FromSlogHandler(slog.NewJSONHandler(w, nil))
}

// RunWith runs the operator with explicit surroundings.
func RunWith(ctx context.Context, args []string, env Env) error {
	o, err := ParseArgs(args, env.Getenv, env.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // the usage is printed
	}
	if err != nil {
		return err
	}
	build := tcversion.Get()
	if o.ShowVersion {
		out := env.Stdout
		if out == nil {
			out = env.Stderr
		}
		_, err := fmt.Fprintln(out, "tiercache-operator", build)
		return err
	}
	log := newLogger(env.Stderr)
	// The first line names the build, before anything can fail.
	log.Info("starting", "version", build.Version, "revision", build.Revision, "goVersion", build.GoVersion,
		"namespace", o.Namespace, "certMode", o.CertMode, "leaderElection", o.LeaderElect)
	reg := env.Registerer
	if reg == nil {
		reg = crmetrics.Registry
	}
	if err := reg.Register(build.Collector()); err != nil {
		return fmt.Errorf("registering %s: %w", tcversion.MetricBuildInfo, err)
	}

	cfg := env.RestConfig
	if cfg == nil {
		if cfg, err = ctrl.GetConfig(); err != nil {
			return fmt.Errorf("reaching the API server: %w", err)
		}
	}
	mgr, err := newManager(cfg, o, log, env.SkipNameValidation)
	if err != nil {
		return err
	}
	// Set at SIGTERM: readiness fails, webhook answers close their
	// connections, and the manager stops --shutdown-delay later.
	var bye leaving
	rec := mgr.GetEventRecorder("tiercache-operator")
	// certReady is closed once the webhook certificate files exist (the
	// control plane serves TLS with them too).
	certReady := make(chan struct{})
	pub := env.Publisher
	var reports *sidecarReports
	if pub == nil {
		if pub, reports, err = setupControlPlane(mgr, o, reg, slog.New(slog.NewJSONHandler(env.Stderr, nil)), rec, certReady); err != nil {
			return err
		}
	}
	secretToTiers, err := indexSecretRefs(ctx, mgr)
	if err != nil {
		return err
	}
	r := &TierReconciler{
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		Events:       rec,
		Publisher:    pub,
		SidecarImage: o.SidecarImage,
	}
	if o.XDSListen != "" {
		r.Refresh = o.StatusRefresh
		r.Relay = true
	}
	if reports != nil {
		r.Sidecars = reports.Tally
	}
	if err := r.SetupWithManager(mgr, secretToTiers, reports); err != nil {
		return err
	}
	if err := (&PublishReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Publisher: pub}).SetupWithManager(mgr, secretToTiers); err != nil {
		return err
	}
	if err := setupWebhooks(ctx, mgr, o, env, certReady, &bye); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("shutdown", bye.readyz); err != nil {
		return err
	}
	return runLeaving(ctx, o.ShutdownDelay, &bye, log, mgr.Start)
}

func newManager(cfg *rest.Config, o Options, log logr.Logger, skipNameValidation bool) (manager.Manager, error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	// The cache holds only injected Pods (they carry the tier label): the
	// controller counts them, and nothing else reads Pods.
	tierLabel, err := labels.NewRequirement(inject.LabelTier, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	// The cache holds only Secrets that opted in to be referenced by
	// CacheTiers, and the operator reads them by metadata only
	// (secretLookup): through the cache an unlabelled Secret does not
	// exist.
	allowed, err := labels.NewRequirement(inject.LabelAllowReference, selection.Equals, []string{"true"})
	if err != nil {
		return nil, err
	}
	sync := o.SyncPeriod
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        log,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.ProbeAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.Namespace,
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       ptr.To(ManagerStopTimeout),
		Controller:                    config.Controller{SkipNameValidation: &skipNameValidation},
		Cache: cache.Options{
			SyncPeriod: &sync,
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Pod{}:    {Label: labels.NewSelector().Add(*tierLabel)},
				&corev1.Secret{}: {Label: labels.NewSelector().Add(*allowed)},
				// The replicas' sidecar reports, read by the leader
				// only (the informer starts with its controller).
				&coordinationv1.Lease{}: {
					Namespaces: map[string]cache.Config{o.Namespace: {}},
					Label:      labels.SelectorFromSet(labels.Set{labelConnectedReport: "true"}),
				},
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	return mgr, nil
}

// setupWebhooks registers the two webhooks on a server that starts once
// its certificate exists (it closes ready then): at once with
// --cert-mode=external, after the rotator wrote it with --cert-mode=self.
// The self-managed certificate also names the xDS Service. Every replica
// serves webhooks; none needs to lead.
func setupWebhooks(ctx context.Context, mgr manager.Manager, o Options, env Env, ready chan struct{}, bye *leaving) error {
	srv := webhook.NewServer(webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.WebhookCertDir})
	pods := admission.WithDefaulter(mgr.GetScheme(), admission.Defaulter[*corev1.Pod](&podInjector{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Opts: o, Events: mgr.GetEventRecorder("tiercache-operator"),
	}))
	pods.Handler = withWarnings(pods.Handler)
	srv.Register(PodMutatePath, bye.closeConns(pods))
	srv.Register(CacheTierValidatePath, bye.closeConns(admission.WithValidator(mgr.GetScheme(), admission.Validator[*v1alpha1.CacheTier](tierValidator{
		Opts:    o,
		secrets: secretLookup{cache: mgr.GetClient(), api: mgr.GetAPIReader()},
	}))))

	switch o.CertMode {
	case CertModeExternal:
		close(ready)
	case CertModeSelf:
		if err := ensureCertSecret(ctx, mgr, o); err != nil {
			return err
		}
		dns := o.WebhookService + "." + o.Namespace + ".svc"
		if err := rotator.AddRotator(mgr, &rotator.CertRotator{
			SecretKey:      types.NamespacedName{Namespace: o.Namespace, Name: o.CertSecretName},
			CertDir:        o.WebhookCertDir,
			CAName:         "tiercache-ca",
			CAOrganization: "tiercache",
			DNSName:        dns,
			ExtraDNSNames:  slices.Concat([]string{dns + ".cluster.local"}, o.xdsDNSNames(), o.CertExtraDNSNames, env.CertExtraDNSNames),
			IsReady:        ready,
			Webhooks: []rotator.WebhookInfo{
				{Name: o.MutatingWebhook, Type: rotator.Mutating},
				{Name: o.ValidatingWebhook, Type: rotator.Validating},
			},
			RequireLeaderElection: false,
		}); err != nil {
			return fmt.Errorf("setting up certificate rotation: %w", err)
		}
	}
	if err := mgr.Add(&gatedServer{srv: srv, ready: ready}); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("webhook", func(req *http.Request) error {
		select {
		case <-ready:
			return srv.StartedChecker()(req)
		default:
			return fmt.Errorf("webhook certificate not ready")
		}
	})
}

// ensureCertSecret creates the (empty) Secret the rotator fills, unless it
// exists: the rotator only updates it. The chart creates it too; this
// covers an operator run outside the chart.
func ensureCertSecret(ctx context.Context, mgr manager.Manager, o Options) error {
	var s corev1.Secret
	key := types.NamespacedName{Namespace: o.Namespace, Name: o.CertSecretName}
	err := mgr.GetAPIReader().Get(ctx, key, &s)
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading the certificate Secret %s: %w", key, err)
	}
	s = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := mgr.GetClient().Create(ctx, &s); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the certificate Secret %s: %w", key, err)
	}
	return nil
}

// gatedServer starts the webhook server once ready is closed.
type gatedServer struct {
	srv   webhook.Server
	ready <-chan struct{}
}

func (g *gatedServer) NeedLeaderElection() bool { return false }

func (g *gatedServer) Start(ctx context.Context) error {
	select {
	case <-g.ready:
	case <-ctx.Done():
		return nil
	}
	return g.srv.Start(ctx)
}
