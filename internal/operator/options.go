package operator

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/tiercache/tiercache/internal/operator/inject"
)

// Options are the operator's parsed command line.
type Options struct {
	// Namespace the operator runs in: its cert Secret lives there, and its
	// pods are never injected (from POD_NAMESPACE in the chart).
	Namespace string

	MetricsAddr string
	ProbeAddr   string
	LeaderElect bool
	// LeaderElectionID names the Lease.
	LeaderElectionID string

	WebhookPort    int
	WebhookHost    string
	WebhookCertDir string
	// CertMode is "self" (the operator creates and rotates its own CA
	// and serving certificate and patches the webhook configurations'
	// caBundle) or "external" (cert-manager or the user mounts the
	// certificate into WebhookCertDir and injects the caBundle).
	CertMode       string
	CertSecretName string
	// CertExtraDNSNames are added to the self-managed certificate (an
	// operator run outside the cluster, reached as localhost).
	CertExtraDNSNames []string
	WebhookService    string
	MutatingWebhook   string
	ValidatingWebhook string

	// SidecarImage is injected unless a tier sets spec.sidecar.image.
	SidecarImage string
	// AllowedSidecarImages are the images a tier's spec.sidecar.image may
	// name, besides SidecarImage: exact references, or prefixes ending in
	// '*'. Empty: only SidecarImage.
	AllowedSidecarImages   []string
	SidecarImagePullPolicy string
	// SidecarRunAsUser and SidecarRunAsGroup are the injected sidecars'
	// uid and gid; nil leaves them unset (the image's numeric USER, or
	// what OpenShift's SCC assigns).
	SidecarRunAsUser, SidecarRunAsGroup *int64
	// SidecarDrainDelay is the injected sidecars' --drain-delay unless a
	// pod's tiercache.io/sidecar-drain-delay sets one.
	SidecarDrainDelay time.Duration
	// SidecarScrapeAnnotations adds prometheus.io/* scrape annotations for
	// the sidecar's admin port to injected pods that set none.
	SidecarScrapeAnnotations bool
	// ControlPlaneAddress is passed to injected sidecars as
	// --control-plane ("" = sidecars run on the config placed in the
	// pod spec).
	ControlPlaneAddress string
	// XDSListen is where this replica serves the control plane ("" =
	// none: sidecars keep the config placed in their pod spec).
	XDSListen string
	// XDSTLS serves the control plane over TLS (the default), with
	// XDSTLSCert and XDSTLSKey when set, else with the webhook's
	// certificate in WebhookCertDir, which then also names XDSService
	// (re-read when the files change). Injected sidecars get the CA
	// (ca.crt in WebhookCertDir, or XDSCAFile) in their pod spec.
	XDSTLS                bool
	XDSTLSCert, XDSTLSKey string
	XDSCAFile             string
	// XDSService is the Service in front of the xDS port: its DNS names
	// go into the self-managed certificate.
	XDSService string
	// XDSAuth is "tokenreview" (sidecars authenticate with a projected
	// ServiceAccount token of audience XDSTokenAudience) or "none"
	// (development only).
	XDSAuth          string
	XDSTokenAudience string
	// RelayPeers is the label selector of this operator's pods in
	// Namespace: each replica receives, from every other one it selects,
	// the invalidations their sidecars publish through the relay
	// (controlplane.Relay) and passes them to its own. Empty: no other
	// replica (one replica, or development).
	RelayPeers string
	// RelayTokenFile is this replica's ServiceAccount token, presented
	// to the other replicas, who check it is the operator's own.
	RelayTokenFile string
	// ReplicaName identifies this replica in its sidecar
	// report (default $POD_NAME, else the host name, which is the pod
	// name in Kubernetes).
	ReplicaName string
	// StatusRefresh is the sidecar report period: each replica renews
	// its report this often (and writes it early on a change, at most
	// every StatusRefresh/10), a report counts for three periods, and the
	// leader re-reads each tier's counts this often.
	StatusRefresh time.Duration
	// MissingTier is "refuse" (admission denies a pod naming a tier that
	// does not exist) or "defaults" (inject with the built-in config).
	MissingTier string
	// ExcludedNamespaces are never injected, besides Namespace.
	ExcludedNamespaces []string
	// SyncPeriod re-reconciles every tier this often (a safety net; every
	// change is watched).
	SyncPeriod time.Duration
	// ShutdownDelay is how long the operator keeps serving after SIGTERM,
	// not ready, before it stops (shutdown.go).
	ShutdownDelay time.Duration
	// ShowVersion (--version) prints the version and exits: no other
	// flag is checked and the API server is not reached.
	ShowVersion bool
}

// Cert modes and missing-tier policies.
const (
	XDSAuthTokenReview   = "tokenreview"
	XDSAuthNone          = "none"
	CertModeSelf         = "self"
	CertModeExternal     = "external"
	MissingTierRefuse    = "refuse"
	MissingTierDefaults  = "defaults"
	defaultSidecarImage  = "ghcr.io/tiercache/tiercache:latest"
	defaultWebhookPrefix = "tiercache"
)

// ParseArgs parses args; getenv supplies POD_NAMESPACE when --namespace is
// not given.
func ParseArgs(args []string, getenv func(string) string, stderr io.Writer) (Options, error) {
	var o Options
	var excluded string
	fs := flag.NewFlagSet("tiercache-operator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Namespace, "namespace", getenv("POD_NAMESPACE"), "namespace the operator runs in (default $POD_NAMESPACE)")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "metrics address; 0 disables")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "elect a leader so one replica writes status")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", "tiercache-operator.tiercache.io", "name of the leader election Lease")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "webhook serving port")
	fs.StringVar(&o.WebhookHost, "webhook-host", "", "webhook serving host (default all interfaces)")
	fs.StringVar(&o.WebhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "directory of tls.crt and tls.key")
	fs.StringVar(&o.CertMode, "cert-mode", CertModeSelf, "self: create, rotate and inject the webhook certificate; external: use the one in --webhook-cert-dir (cert-manager)")
	fs.StringVar(&o.CertSecretName, "cert-secret", "tiercache-webhook-cert", "Secret (in --namespace) holding the self-managed CA and certificate")
	var extraDNS string
	fs.StringVar(&extraDNS, "webhook-cert-extra-dns-names", "", "comma-separated extra DNS names in the self-managed certificate (e.g. localhost for an operator run outside the cluster)")
	fs.StringVar(&o.WebhookService, "webhook-service", "tiercache-webhook", "Service in front of the webhook port (the certificate's DNS name)")
	fs.StringVar(&o.MutatingWebhook, "mutating-webhook-configuration", defaultWebhookPrefix+"-inject", "MutatingWebhookConfiguration whose caBundle is managed")
	fs.StringVar(&o.ValidatingWebhook, "validating-webhook-configuration", defaultWebhookPrefix+"-validate", "ValidatingWebhookConfiguration whose caBundle is managed")
	fs.StringVar(&o.SidecarImage, "sidecar-image", defaultSidecarImage, "sidecar image injected unless the tier sets spec.sidecar.image")
	var allowedImages string
	fs.StringVar(&allowedImages, "allowed-sidecar-images", "", "comma-separated images a CacheTier's spec.sidecar.image may name besides --sidecar-image: exact references, or prefixes ending in * (registry.example.com/tiercache/*); empty: only --sidecar-image")
	fs.StringVar(&o.SidecarImagePullPolicy, "sidecar-image-pull-policy", "", "Always, IfNotPresent or Never (default: the cluster's)")
	fs.Func("sidecar-run-as-user", "uid of injected sidecars (default: unset, the image's USER 65532 or what the pod's securityContext or OpenShift's SCC assigns)", intFlag(&o.SidecarRunAsUser))
	fs.Func("sidecar-run-as-group", "gid of injected sidecars (default: unset)", intFlag(&o.SidecarRunAsGroup))
	fs.BoolVar(&o.SidecarScrapeAnnotations, "sidecar-scrape-annotations", false, "add prometheus.io/scrape, /port and /path for the sidecar's admin port to injected pods that set no prometheus.io/scrape of their own (for a Prometheus without the PodMonitor)")
	fs.DurationVar(&o.SidecarDrainDelay, "sidecar-drain-delay", inject.DefaultDrainDelay, "injected sidecars keep serving this long after SIGTERM with /readyz failing (cut to half a pod's terminationGracePeriodSeconds; a pod's tiercache.io/sidecar-drain-delay wins)")
	fs.StringVar(&o.ControlPlaneAddress, "control-plane-address", "", "xDS address injected sidecars connect to (host:port); empty: no live config")
	fs.StringVar(&o.XDSListen, "xds-listen", ":18000", "control plane (xDS over gRPC) address; empty disables live config")
	fs.BoolVar(&o.XDSTLS, "xds-tls", true, "serve the control plane over TLS; false serves plaintext (sidecar tokens then cross the network in the clear)")
	fs.StringVar(&o.XDSTLSCert, "xds-tls-cert-file", "", "PEM certificate of the control plane (with --xds-tls-key-file); default: tls.crt in --webhook-cert-dir")
	fs.StringVar(&o.XDSTLSKey, "xds-tls-key-file", "", "PEM key of --xds-tls-cert-file; default: tls.key in --webhook-cert-dir")
	fs.StringVar(&o.XDSCAFile, "xds-ca-file", "", "PEM CA of the control plane's certificate, placed in injected pods; default: ca.crt in --webhook-cert-dir")
	fs.StringVar(&o.XDSService, "xds-service", "tiercache-xds", "Service in front of the xDS port (its DNS names go into the self-managed certificate)")
	fs.StringVar(&o.XDSAuth, "xds-auth", XDSAuthTokenReview, "how sidecars authenticate to the control plane: tokenreview (projected ServiceAccount token, checked with a TokenReview) or none (development only)")
	fs.StringVar(&o.XDSTokenAudience, "xds-token-audience", "tiercache-xds", "audience of the sidecars' projected ServiceAccount token")
	fs.StringVar(&o.RelayPeers, "relay-peers", "", "label selector of this operator's pods in --namespace: every replica relays the invalidations of tiers without L2 to the others (the chart sets it); empty: this replica only")
	fs.StringVar(&o.RelayTokenFile, "relay-token-file", "/var/run/secrets/kubernetes.io/serviceaccount/token", "this replica's ServiceAccount token, presented to the other replicas of --relay-peers")
	fs.StringVar(&o.ReplicaName, "replica-name", defaultReplicaName(getenv), "this replica's name in its sidecar report, the Lease tiercache-connected-<name> (default $POD_NAME or the host name)")
	fs.DurationVar(&o.StatusRefresh, "status-refresh", 30*time.Second, "period of each replica's sidecar report (renewed this often, written early on a change at most every tenth of it, expired after three) and of each tier's status refresh")
	fs.StringVar(&o.MissingTier, "missing-tier", MissingTierRefuse, "a pod naming a tier that does not exist: refuse (deny admission) or defaults (inject the built-in config)")
	fs.StringVar(&excluded, "excluded-namespaces", "kube-system,kube-public,kube-node-lease", "comma-separated namespaces never injected (the operator's own always is)")
	fs.DurationVar(&o.SyncPeriod, "sync-period", 10*time.Hour, "full re-reconcile period")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay", DefaultShutdownDelay, "on SIGTERM, keep serving webhooks and xDS this long with /readyz failing (webhook answers close their connections) before stopping, so that the API server's calls move to another replica first; 0-5m")
	fs.BoolVar(&o.ShowVersion, "version", false, "print the version, git revision and Go version, and exit")
	if err := fs.Parse(args); err != nil {
		return Options{}, err
	}
	if o.ShowVersion {
		return Options{ShowVersion: true}, nil
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	o.ExcludedNamespaces = splitList(excluded)
	o.CertExtraDNSNames = splitList(extraDNS)
	o.AllowedSidecarImages = splitList(allowedImages)
	return o, o.Validate()
}

// Validate checks the options; errors name the flag.
func (o Options) Validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("--namespace: required (or set POD_NAMESPACE)"))
	}
	switch o.CertMode {
	case CertModeSelf, CertModeExternal:
	default:
		errs = append(errs, fmt.Errorf("--cert-mode: must be %s or %s (got %q)", CertModeSelf, CertModeExternal, o.CertMode))
	}
	switch o.MissingTier {
	case MissingTierRefuse, MissingTierDefaults:
	default:
		errs = append(errs, fmt.Errorf("--missing-tier: must be %s or %s (got %q)", MissingTierRefuse, MissingTierDefaults, o.MissingTier))
	}
	switch o.SidecarImagePullPolicy {
	case "", "Always", "IfNotPresent", "Never":
	default:
		errs = append(errs, fmt.Errorf("--sidecar-image-pull-policy: must be Always, IfNotPresent or Never (got %q)", o.SidecarImagePullPolicy))
	}
	if o.SidecarImage == "" {
		errs = append(errs, errors.New("--sidecar-image: required"))
	}
	for _, id := range []struct {
		flag string
		v    *int64
	}{{"--sidecar-run-as-user", o.SidecarRunAsUser}, {"--sidecar-run-as-group", o.SidecarRunAsGroup}} {
		if id.v != nil && *id.v < 1 {
			errs = append(errs, fmt.Errorf("%s: must be > 0, the sidecar runs as non-root (got %d)", id.flag, *id.v))
		}
	}
	if o.SidecarDrainDelay < 0 || o.SidecarDrainDelay > inject.MaxDrainDelay {
		errs = append(errs, fmt.Errorf("--sidecar-drain-delay: must be between 0s and %s (got %s)", inject.MaxDrainDelay, o.SidecarDrainDelay))
	}
	for _, img := range o.AllowedSidecarImages {
		if i := strings.IndexByte(img, '*'); i >= 0 && i != len(img)-1 || img == "*" {
			errs = append(errs, fmt.Errorf("--allowed-sidecar-images: %q: a '*' may only end a prefix, and a lone '*' would allow any image", img))
		}
	}
	if o.WebhookPort < 1 || o.WebhookPort > 65535 {
		errs = append(errs, fmt.Errorf("--webhook-port: must be 1-65535 (got %d)", o.WebhookPort))
	}
	if (o.XDSTLSCert == "") != (o.XDSTLSKey == "") {
		errs = append(errs, errors.New("--xds-tls-cert-file and --xds-tls-key-file: give both or neither"))
	}
	switch o.XDSAuth {
	case XDSAuthTokenReview, XDSAuthNone:
	default:
		errs = append(errs, fmt.Errorf("--xds-auth: must be %s or %s (got %q)", XDSAuthTokenReview, XDSAuthNone, o.XDSAuth))
	}
	if o.XDSAuth == XDSAuthTokenReview && o.XDSTokenAudience == "" {
		errs = append(errs, errors.New("--xds-token-audience: required with --xds-auth=tokenreview"))
	}
	if o.XDSListen != "" && o.XDSTLS && o.XDSService == "" && o.CertMode == CertModeSelf && o.XDSTLSCert == "" {
		errs = append(errs, errors.New("--xds-service: required to serve xDS with the self-managed certificate"))
	}
	if o.XDSListen != "" && (o.ReplicaName == "" || len(o.ReplicaName) > 200) {
		errs = append(errs, fmt.Errorf("--replica-name: must be 1-200 characters (got %q)", o.ReplicaName))
	}
	if o.RelayPeers != "" {
		if _, err := labels.Parse(o.RelayPeers); err != nil {
			errs = append(errs, fmt.Errorf("--relay-peers: %w", err))
		}
		if o.XDSListen == "" {
			errs = append(errs, errors.New("--relay-peers: needs the control plane (--xds-listen)"))
		}
	}
	if o.StatusRefresh <= 0 {
		errs = append(errs, fmt.Errorf("--status-refresh: must be > 0 (got %s)", o.StatusRefresh))
	}
	if o.SyncPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--sync-period: must be > 0 (got %s)", o.SyncPeriod))
	}
	if o.ShutdownDelay < 0 || o.ShutdownDelay > maxShutdownDelay {
		errs = append(errs, fmt.Errorf("--shutdown-delay: must be between 0s and %s (got %s)", maxShutdownDelay, o.ShutdownDelay))
	}
	return errors.Join(errs...)
}

// intFlag parses an optional integer flag into *dst: "" leaves it nil.
func intFlag(dst **int64) func(string) error {
	return func(v string) error {
		if v == "" {
			*dst = nil
			return nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		*dst = &n
		return nil
	}
}

// sidecarImageAllowed reports whether a tier may run image as its
// sidecar: the operator's own sidecar image, or one the allowlist names.
func (o Options) sidecarImageAllowed(image string) bool {
	if image == o.SidecarImage {
		return true
	}
	for _, a := range o.AllowedSidecarImages {
		if prefix, ok := strings.CutSuffix(a, "*"); ok && strings.HasPrefix(image, prefix) || a == image {
			return true
		}
	}
	return false
}

// reportMinGap is the shortest time between two writes of a replica's
// sidecar report: a tenth of the period (3s by default), at least 100ms.
func (o Options) reportMinGap() time.Duration {
	return max(o.StatusRefresh/10, 100*time.Millisecond)
}

// xdsCertFiles are the certificate and key the control plane serves.
func (o Options) xdsCertFiles() (cert, key string) {
	if o.XDSTLSCert != "" {
		return o.XDSTLSCert, o.XDSTLSKey
	}
	return filepath.Join(o.WebhookCertDir, "tls.crt"), filepath.Join(o.WebhookCertDir, "tls.key")
}

// xdsCAFile is the CA bundle injected sidecars trust for the control
// plane.
func (o Options) xdsCAFile() string {
	if o.XDSCAFile != "" {
		return o.XDSCAFile
	}
	return filepath.Join(o.WebhookCertDir, "ca.crt")
}

// xdsDNSNames are the names of the xDS Service, for the self-managed
// certificate.
func (o Options) xdsDNSNames() []string {
	if o.XDSListen == "" || !o.XDSTLS || o.XDSService == "" {
		return nil
	}
	svc := o.XDSService + "." + o.Namespace + ".svc"
	names := []string{svc, svc + ".cluster.local"}
	// Sidecars check the name they dial.
	if host, _, err := net.SplitHostPort(o.ControlPlaneAddress); err == nil && net.ParseIP(host) == nil && !slices.Contains(names, host) {
		names = append(names, host)
	}
	return names
}

// excluded lists the namespaces whose pods are never injected: the
// operator's own and ExcludedNamespaces.
func (o Options) excluded() []string {
	return append([]string{o.Namespace}, o.ExcludedNamespaces...)
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func defaultReplicaName(getenv func(string) string) string {
	if n := getenv("POD_NAME"); n != "" {
		return n
	}
	n, _ := os.Hostname()
	return n
}
