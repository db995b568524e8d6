package operator

import (
	"context"
	"crypto/x509"
	"encoding/json"
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
// (without Secrets: those reach the container as secretKeyRef variables).
type podInjector struct {
	// Client reads CacheTiers from the manager's cache; APIReader is the
	// fallback for a tier created a moment ago that the cache has not
	// seen yet.
	Client    client.Reader
	APIReader client.Reader
	Opts      Options
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
	name := pod.Annotations[inject.AnnotationTier]
	tier, err := w.tier(ctx, ns, name)
	if err != nil {
		return err
	}
	p, err := w.params(tier)
	if err != nil {
		return err
	}
	if err := w.controlPlane(&p); err != nil {
		return err
	}
	if err := inject.Inject(pod, p); err != nil {
		return fmt.Errorf("tiercache: cannot inject the sidecar: %w", err)
	}
	return nil
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

// params renders the tier for the pod spec: the config with secret fields
// empty, and the Secret references the sidecar reads from its environment.
func (w *podInjector) params(t *v1alpha1.CacheTier) (inject.Params, error) {
	cfg, err := render.Redacted(t)
	if err != nil {
		// The validating webhook refuses such a tier; one written while it
		// was down (or before it existed) still must not reach a pod.
		return inject.Params{}, fmt.Errorf("tiercache: CacheTier %q is not valid, not injecting: %w", t.Name, render.FieldErrors(err).ToAggregate())
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		return inject.Params{}, fmt.Errorf("tiercache: encoding the config of CacheTier %q: %w", t.Name, err)
	}
	sc := t.Spec.Sidecar
	p := inject.Params{
		Tier:            t.Name,
		InitialConfig:   js,
		ConfigHash:      cfg.Hash(),
		L1MaxSize:       int64(cfg.L1.MaxSize),
		Image:           w.Opts.SidecarImage,
		ImagePullPolicy: corev1.PullPolicy(w.Opts.SidecarImagePullPolicy),
		Resources:       sc.Resources,
		Port:            sc.Port,
		AdminPort:       sc.AdminPort,
		ControlPlane:    w.Opts.ControlPlaneAddress,
		PurgeToken:      t.Spec.Purge.TokenSecretRef,
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
	if l2 := t.Spec.L2; l2 != nil {
		p.RedisPassword = l2.PasswordSecretRef
		if l2.TLS != nil {
			p.RedisCACert = l2.TLS.CASecretRef
		}
	}
	return p, nil
}

// tierValidator is the validating admission webhook for CacheTiers: the
// same render and tierconfig.Validate the controller and the sidecar run,
// with errors naming the CacheTier fields.
type tierValidator struct{ Opts Options }

var _ admission.Validator[*v1alpha1.CacheTier] = tierValidator{}

func (v tierValidator) ValidateCreate(_ context.Context, t *v1alpha1.CacheTier) (admission.Warnings, error) {
	return v.validateTier(t)
}

func (v tierValidator) ValidateUpdate(_ context.Context, _, t *v1alpha1.CacheTier) (admission.Warnings, error) {
	return v.validateTier(t)
}

func (v tierValidator) ValidateDelete(context.Context, *v1alpha1.CacheTier) (admission.Warnings, error) {
	return nil, nil
}

func (v tierValidator) validateTier(t *v1alpha1.CacheTier) (admission.Warnings, error) {
	var errs field.ErrorList
	if _, err := render.Redacted(t); err != nil {
		errs = render.FieldErrors(err)
	}
	if err := v.Opts.checkSidecarImage(t); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("CacheTier").GroupKind(), t.Name, errs)
	}
	return nil, nil
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
