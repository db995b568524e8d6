package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/internal/operator/render"
)

// cluster is the API server as the commands use it.
type cluster struct {
	c         client.Client
	rest      *rest.Config
	namespace string
}

// cluster connects with the kubeconfig flags. It is called only by the
// commands that need the API server, so that a purge with --address and
// --purge-token-file works without a kubeconfig.
func (r *runner) cluster() (*cluster, error) {
	cfg, err := r.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := r.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: namespace: %w", err)
	}
	s := runtime.NewScheme()
	if err := errors.Join(corev1.AddToScheme(s), v1alpha1.AddToScheme(s)); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server %s: %w", cfg.Host, err)
	}
	return &cluster{c: c, rest: cfg, namespace: ns}, nil
}

// tier reads the CacheTier name of the namespace, with errors that say
// what is missing.
func (k *cluster) tier(ctx context.Context, name string) (*v1alpha1.CacheTier, error) {
	var t v1alpha1.CacheTier
	err := k.c.Get(ctx, client.ObjectKey{Namespace: k.namespace, Name: name}, &t)
	switch {
	case err == nil:
		return &t, nil
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("CacheTier %q not found in namespace %q (kubectl get ct -n %s lists them)", name, k.namespace, k.namespace)
	case meta.IsNoMatchError(err):
		return nil, fmt.Errorf("the CacheTier API (%s) is not installed in this cluster: install the tiercache chart", v1alpha1.GroupVersion)
	}
	return nil, fmt.Errorf("reading CacheTier %s/%s: %w", k.namespace, name, err)
}

// purgeToken reads the tier's purge token from the Secret its sidecars
// get it from: spec.purge.tokenSecretRef, else the generated Secret
// <tier>-tiercache (render.SecretFiles decides, as for the pods). The
// generated Secret counts only when the operator generated it for this
// tier, as for the operator; a referenced one needs the allow label.
func (k *cluster) purgeToken(ctx context.Context, tier *v1alpha1.CacheTier) (string, error) {
	var f render.SecretFile
	for _, sf := range render.SecretFiles(tier) {
		if sf.File == inject.FilePurgeToken {
			f = sf
		}
	}
	where := fmt.Sprintf("Secret %s/%s", tier.Namespace, f.Secret)
	var s corev1.Secret
	err := k.c.Get(ctx, client.ObjectKey{Namespace: tier.Namespace, Name: f.Secret}, &s)
	switch {
	case apierrors.IsNotFound(err) && f.Generated():
		return "", fmt.Errorf("no purge token for CacheTier %s/%s: %s not found (the operator creates it; is the operator running?)", tier.Namespace, tier.Name, where)
	case apierrors.IsNotFound(err):
		return "", fmt.Errorf("no purge token for CacheTier %s/%s: %s (%s) not found", tier.Namespace, tier.Name, where, f.Field)
	case apierrors.IsForbidden(err):
		return "", fmt.Errorf("no purge token for CacheTier %s/%s: reading %s is forbidden to you (it needs get on secrets in %s; or pass --purge-token-file)", tier.Namespace, tier.Name, where, tier.Namespace)
	case err != nil:
		return "", fmt.Errorf("reading the purge token from %s: %w", where, err)
	}
	if _, err := render.ResolveSecret(ctx, tier, secretMeta{&s}, f); err != nil {
		return "", fmt.Errorf("no purge token for CacheTier %s/%s: %s is %w, so the tier's sidecars do not use it", tier.Namespace, tier.Name, where, err)
	}
	v, ok := s.Data[f.Key]
	// The sidecar reads the file the same way: trailing line ends are not
	// part of the token.
	token := strings.TrimRight(string(v), "\r\n")
	if !ok || token == "" {
		return "", fmt.Errorf("no purge token for CacheTier %s/%s: %s has no key %q", tier.Namespace, tier.Name, where, f.Key)
	}
	return token, nil
}

// secretMeta answers render.Secrets with one Secret already read.
type secretMeta struct{ s *corev1.Secret }

func (m secretMeta) SecretMeta(context.Context, string, string) (metav1.Object, error) {
	return m.s, nil
}

// tierPods lists the pods of the tier's namespace that are labelled or
// annotated for it, sorted by name.
func (k *cluster) tierPods(ctx context.Context, tier *v1alpha1.CacheTier) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := k.c.List(ctx, &list, client.InNamespace(tier.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the pods of namespace %s: %w", tier.Namespace, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Labels[inject.LabelTier] == tier.Name || p.Annotations[inject.AnnotationTier] == tier.Name {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// sidecarOf returns the pod's injected sidecar container, or nil.
func sidecarOf(p *corev1.Pod) *corev1.Container {
	for i := range p.Spec.InitContainers {
		if c := &p.Spec.InitContainers[i]; c.Name == inject.ContainerName {
			return c
		}
	}
	return nil
}

// adminPort is the sidecar's admin port in p: its port named
// inject.AdminPortName, else the tier's spec.sidecar.adminPort, else the
// default.
func adminPort(p *corev1.Pod, tier *v1alpha1.CacheTier) int32 {
	if c := sidecarOf(p); c != nil {
		for _, port := range c.Ports {
			if port.Name == inject.AdminPortName {
				return port.ContainerPort
			}
		}
	}
	if tier.Spec.Sidecar.AdminPort != 0 {
		return tier.Spec.Sidecar.AdminPort
	}
	return inject.DefaultAdminPort
}

// podReady reports the pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podState says why a pod of the tier has no sidecar to talk to ("" when
// it has one that may be running).
func podState(p *corev1.Pod) string {
	if sidecarOf(p) == nil {
		return "not injected"
	}
	return runState(p)
}

// runState says why a pod cannot be read (terminating, not scheduled,
// not running), or "" when it runs.
func runState(p *corev1.Pod) string {
	switch {
	case p.DeletionTimestamp != nil:
		return "terminating"
	case p.Status.Phase == "", p.Status.Phase == corev1.PodPending && p.Spec.NodeName == "":
		return "not scheduled"
	case p.Status.Phase != corev1.PodRunning:
		return strings.ToLower(string(p.Status.Phase))
	}
	return ""
}
