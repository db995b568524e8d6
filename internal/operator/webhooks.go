package operator

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/internal/operator/render"
)

// Webhook paths, as registered in the webhook configurations (chart and
// config/webhook).
const (
	PodMutatePath         = "/mutate-v1-pod"
	CacheTierValidatePath = "/validate-tiercache-io-v1alpha1-cachetier"
)

// podInjector is the mutating admission webhook for Pods: it injects the
// sidecar into pods annotated tiercache.io/tier, rendering the named tier
// with its Secrets by resourceVersion (their values reach the container as
// files of a projected volume, never in the pod spec).
type podInjector struct {
	// Client reads CacheTiers and labelled Secrets (metadata) from the
	// manager's cache; APIReader is the fallback for an object created a
	// moment ago that the cache has not seen yet, and tells an unlabelled
	// Secret from a missing one.
	Client    client.Reader
	APIReader client.Reader
	Opts      Options
	// Events, when set, records a Warning Event on the CacheTier for a
	// pod admitted without the sidecar (see http2Port).
	Events events.EventRecorder
}

var _ admission.Defaulter[*corev1.Pod] = (*podInjector)(nil)

// Default implements admission.Defaulter. An error denies the admission
// with its message.
func (w *podInjector) Default(ctx context.Context, pod *corev1.Pod) error {
	ns := pod.Namespace
	if req, err := admission.RequestFromContext(ctx); err == nil && req.Namespace != "" {
		ns = req.Namespace
	}
	ok, reason := inject.InjectRequired(pod, ns, w.Opts.excluded())
	if !ok {
		logf.FromContext(ctx).V(1).Info("not injecting", "reason", reason)
		return nil
	}
	// The pod's own overrides first: a bad one is the pod's fault, named
	// whatever the tier.
	if _, err := inject.PodOverrides(pod); err != nil {
		return fmt.Errorf("tiercache: cannot inject the sidecar: %w", err)
	}
	name := pod.Annotations[inject.AnnotationTier]
	tier, err := w.tier(ctx, ns, name)
	if err != nil {
		return err
	}
	if skip, err := w.http2Port(ctx, ns, pod, tier); err != nil || skip {
		return err
	}
	p, err := w.params(ctx, tier)
	if err != nil {
		return err
	}
	if err := w.controlPlane(&p); err != nil {
		return err
	}
	// One per pod: knowing it drains only that pod.
	p.DrainToken = rand.Text()
	if err := inject.Inject(pod, p); err != nil {
		return fmt.Errorf("tiercache: cannot inject the sidecar: %w", err)
	}
	return nil
}

// http2Port reports whether the pod is to be admitted without the
// sidecar because a Service declares the port it would front HTTP/2 or
// gRPC (appProtocol) and the tier does not set spec.sidecar.frontHTTP2:
// such a port carries traffic the sidecar would only pass through. It
// says so in an admission warning (seen by whoever created the pod
// directly), a Warning Event on the tier (seen when a controller created
// it) and a log line. The pod is not refused: a Service, which someone
// else may own, must not stop a workload from running.
func (w *podInjector) http2Port(ctx context.Context, ns string, pod *corev1.Pod, tier *v1alpha1.CacheTier) (bool, error) {
	if tier.Spec.Sidecar.FrontHTTP2 {
		return false, nil
	}
	var svcs corev1.ServiceList
	if err := w.Client.List(ctx, &svcs, client.InNamespace(ns)); err != nil {
		return false, fmt.Errorf("tiercache: listing the Services of namespace %q: %w", ns, err)
	}
	why := inject.DeclaredHTTP2(pod, svcs.Items)
	if why == "" {
		return false, nil
	}
	msg := fmt.Sprintf("tiercache: the sidecar of CacheTier %q was not injected: %s, and the tier does not set spec.sidecar.frontHTTP2: true (set it to front the port anyway: HTTP/2 and gRPC pass through uncached, HTTP/1.1 is cached)", tier.Name, why)
	admissionWarning(ctx, msg)
	logf.FromContext(ctx).Info("not injecting: the fronted port is declared HTTP/2 or gRPC", "tier", tier.Name, "reason", why)
	if w.Events != nil && tier.UID != "" {
		w.Events.Eventf(tier, nil, corev1.EventTypeWarning, v1alpha1.ReasonServiceDeclaresHTTP2, "Inject", "pod %s: %s", podName(pod), msg)
	}
	return true, nil
}

// podName is a pod's name at admission: its generateName with a "*" when
// the API server has not named it yet.
func podName(p *corev1.Pod) string {
	if p.Name != "" {
		return p.Name
	}
	return p.GenerateName + "*"
}

// warningsKey holds the warnings a webhook collects for its answer.
type warningsKey struct{}

// withWarnings lets the Defaulter that h wraps add admission warnings
// (admissionWarning), which admission.Defaulter has no way to return.
func withWarnings(h admission.Handler) admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		var ws admission.Warnings
		resp := h.Handle(context.WithValue(ctx, warningsKey{}, &ws), req)
		resp.Warnings = append(resp.Warnings, ws...)
		return resp
	})
}

// admissionWarning adds msg to the warnings of the admission answer (a
// no-op outside withWarnings).
func admissionWarning(ctx context.Context, msg string) {
	if ws, ok := ctx.Value(warningsKey{}).(*admission.Warnings); ok {
		*ws = append(*ws, msg)
	}
}

// controlPlane fills in how the sidecar reaches the control plane: the
// token audience, and the CA of its certificate (read at every admission,
// so a renewed CA reaches the pods created after it).
func (w *podInjector) controlPlane(p *inject.Params) error {
	if w.Opts.ControlPlaneAddress == "" {
		return nil
	}
	if w.Opts.XDSAuth == XDSAuthTokenReview {
		p.TokenAudience = w.Opts.XDSTokenAudience
	}
	if w.Opts.XDSTLS {
		ca, err := readCA(w.Opts.xdsCAFile())
		if err != nil {
			return fmt.Errorf("tiercache: cannot inject the control plane's CA (the operator serves xDS over TLS): %w; give the operator --xds-ca-file, or serve xDS in plaintext (chart value controlPlane.tls.enabled=false)", err)
		}
		p.ControlPlaneCA = ca
	}
	return nil
}

// readCA reads a PEM CA bundle, checking that it holds a certificate.
func readCA(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate", path)
	}
	return b, nil
}

// tier returns the named CacheTier, or the built-in one when it is missing
// and the operator runs with --missing-tier=defaults.
func (w *podInjector) tier(ctx context.Context, ns, name string) (*v1alpha1.CacheTier, error) {
	key := types.NamespacedName{Namespace: ns, Name: name}
	var t v1alpha1.CacheTier
	err := w.Client.Get(ctx, key, &t)
	if apierrors.IsNotFound(err) && w.APIReader != nil {
		err = w.APIReader.Get(ctx, key, &t)
	}
	switch {
	case err == nil:
		return &t, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("tiercache: reading CacheTier %q: %w", name, err)
	case w.Opts.MissingTier == MissingTierDefaults:
		t = v1alpha1.CacheTier{}
		t.Namespace, t.Name = ns, name
		return &t, nil
	default:
		return nil, fmt.Errorf("tiercache: annotation %s names CacheTier %q, which does not exist in namespace %q; create it (kubectl apply a CacheTier named %q) or install the chart with injection.missingTier=defaults to inject the built-in config",
			inject.AnnotationTier, name, ns, name)
	}
}

// params renders the tier for the pod spec: the config without secret
// values and the Secret files to project. A referenced Secret is
// projected only when it exists and is labelled
// tiercache.io/allow-reference=true: an unlabelled one (even optional) or
// a missing required one refuses the pod, saying how to fix it; a missing
// optional one is left out. The generated Secret is projected even before
// the controller has created it (the kubelet waits for it), unless a
// Secret of its name that is not the tier's exists.
func (w *podInjector) params(ctx context.Context, t *v1alpha1.CacheTier) (inject.Params, error) {
	cfg, err := render.Redacted(t)
	if err != nil {
		// The validating webhook refuses such a tier; one written while it
		// was down (or before it existed) still must not reach a pod.
		return inject.Params{}, fmt.Errorf("tiercache: CacheTier %q is not valid, not injecting: %w", t.Name, render.FieldErrors(err).ToAggregate())
	}
	var files []inject.SecretFile
	if t.UID != "" { // not the built-in tier of --missing-tier=defaults
		versions, err := render.SecretVersions(ctx, t, secretLookup{cache: w.Client, api: w.APIReader})
		var refuse []string
		for _, se := range render.SecretErrors(err) {
			switch {
			case se.File.Generated() && errors.Is(se, render.ErrNotFound):
			case render.Transient(se):
				return inject.Params{}, fmt.Errorf("tiercache: CacheTier %q: %w", t.Name, se)
			default:
				refuse = append(refuse, se.Error())
			}
		}
		if len(refuse) > 0 {
			return inject.Params{}, fmt.Errorf("tiercache: CacheTier %q cannot be used yet, not injecting: %s", t.Name, strings.Join(refuse, "; "))
		}
		for _, f := range secretFilesToProject(t, versions) {
			files = append(files, inject.SecretFile{File: f.File, Secret: f.Secret, Key: f.Key, Optional: f.Optional})
		}
		if len(versions) > 0 {
			cfg.SecretVersions = versions
		}
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		return inject.Params{}, fmt.Errorf("tiercache: encoding the config of CacheTier %q: %w", t.Name, err)
	}
	// Redacted has checked it.
	vol, err := render.BodyVolume(t.Spec)
	if err != nil {
		return inject.Params{}, fmt.Errorf("tiercache: CacheTier %q is not valid, not injecting: %w", t.Name, render.FieldErrors(err).ToAggregate())
	}
	sc := t.Spec.Sidecar
	p := inject.Params{
		BodyStoreSize:     vol.Size,
		BodyStoreMedium:   vol.Medium(),
		Tier:              t.Name,
		InitialConfig:     js,
		ConfigHash:        cfg.Hash(),
		L1MaxSize:         int64(cfg.L1.MaxSize),
		Image:             w.Opts.SidecarImage,
		ImagePullPolicy:   corev1.PullPolicy(w.Opts.SidecarImagePullPolicy),
		Resources:         sc.Resources,
		Port:              sc.Port,
		AdminPort:         sc.AdminPort,
		ControlPlane:      w.Opts.ControlPlaneAddress,
		Secrets:           files,
		RunAsUser:         w.Opts.SidecarRunAsUser,
		RunAsGroup:        w.Opts.SidecarRunAsGroup,
		DrainDelay:        &w.Opts.SidecarDrainDelay,
		ScrapeAnnotations: w.Opts.SidecarScrapeAnnotations,
		FrontHTTP2:        sc.FrontHTTP2,
	}
	if err := w.Opts.checkSidecarImage(t); err != nil {
		// A tier written while the validating webhook was down (or
		// before the allowlist changed) must not choose the pod's code.
		return inject.Params{}, fmt.Errorf("tiercache: CacheTier %q: %s", t.Name, err.Error())
	}
	if sc.Image != "" {
		p.Image = sc.Image
	}
	if sc.ImagePullPolicy != "" {
		p.ImagePullPolicy = sc.ImagePullPolicy
	}
	return p, nil
}

// tierValidator is the validating admission webhook for CacheTiers: the
// same render and tierconfig.Validate the controller and the sidecar run,
// with errors naming the CacheTier fields, and the opt-in check of the
// Secrets the tier references: one that exists without the label
// tiercache.io/allow-reference=true is refused (with the kubectl command
// that labels it); one that does not exist yet is allowed with a warning
// (it may be created after the tier), and the tier's status says so.
type tierValidator struct {
	Opts    Options
	secrets render.Secrets
}

var _ admission.Validator[*v1alpha1.CacheTier] = tierValidator{}

func (v tierValidator) ValidateCreate(ctx context.Context, t *v1alpha1.CacheTier) (admission.Warnings, error) {
	return v.validate(ctx, t)
}

func (v tierValidator) ValidateUpdate(ctx context.Context, _, t *v1alpha1.CacheTier) (admission.Warnings, error) {
	return v.validate(ctx, t)
}

func (v tierValidator) ValidateDelete(context.Context, *v1alpha1.CacheTier) (admission.Warnings, error) {
	return nil, nil
}

func (v tierValidator) validate(ctx context.Context, t *v1alpha1.CacheTier) (admission.Warnings, error) {
	gk := v1alpha1.GroupVersion.WithKind("CacheTier").GroupKind()
	var invalid field.ErrorList
	if _, err := render.Redacted(t); err != nil {
		invalid = render.FieldErrors(err)
	}
	if err := v.Opts.checkSidecarImage(t); err != nil {
		invalid = append(invalid, err)
	}
	if len(invalid) > 0 {
		return nil, apierrors.NewInvalid(gk, t.Name, invalid)
	}
	var warnings admission.Warnings
	var refused field.ErrorList
	for _, f := range render.SecretFiles(t) {
		if f.Generated() {
			continue // the controller creates it, or reports a conflict
		}
		_, err := render.ResolveSecret(ctx, t, v.secrets, f)
		se := &render.SecretError{File: f, Namespace: t.Namespace, Tier: t.Name, Err: err}
		switch {
		case err == nil:
		case errors.Is(err, render.ErrNotFound):
			warnings = append(warnings, se.Error())
		case errors.Is(err, render.ErrNotAllowed), errors.Is(err, render.ErrOtherTiersSecret):
			refused = append(refused, field.Invalid(field.NewPath(f.Field), f.Secret, se.Error()))
		default:
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("%s: cannot check Secret %q: %v", f.Field, f.Secret, err))
		}
	}
	if len(refused) > 0 {
		return warnings, apierrors.NewInvalid(gk, t.Name, refused)
	}
	return warnings, nil
}

// checkSidecarImage refuses a tier whose spec.sidecar.image the operator
// does not allow: whoever may edit a CacheTier must not choose the code
// that runs in every annotated pod of the namespace.
func (o Options) checkSidecarImage(t *v1alpha1.CacheTier) *field.Error {
	img := t.Spec.Sidecar.Image
	if img == "" || o.sidecarImageAllowed(img) {
		return nil
	}
	allowed := append([]string{o.SidecarImage}, o.AllowedSidecarImages...)
	return field.Forbidden(field.NewPath("spec", "sidecar", "image"),
		fmt.Sprintf("image %q is not allowed by the operator; allowed: %s (leave the field empty for the default, or ask the cluster's administrators to add it to the chart value sidecar.allowedImages)", img, strings.Join(allowed, ", ")))
}

// newScheme returns the scheme the operator's clients and webhooks use.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := authnv1.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := coordinationv1.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}
