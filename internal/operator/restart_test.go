package operator

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/internal/operator/render"
)

// injectedWith is a pod injected (by inject.Inject, as the webhook does)
// with the secret files tier would project when every reference resolved.
func injectedWith(t *testing.T, name string, tier *v1alpha1.CacheTier) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Annotations: map[string]string{inject.AnnotationTier: tier.Name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
	}
	var files []inject.SecretFile
	for _, f := range secretFilesToProject(tier, allResolved(tier)) {
		files = append(files, inject.SecretFile{File: f.File, Secret: f.Secret, Key: f.Key, Optional: f.Optional})
	}
	if err := inject.Inject(p, inject.Params{Tier: tier.Name, Image: "sidecar", Secrets: files}); err != nil {
		t.Fatal(err)
	}
	return p
}

// allResolved is the versions of a tier whose every reference resolved.
func allResolved(tier *v1alpha1.CacheTier) map[string]string {
	out := map[string]string{}
	for _, f := range render.SecretFiles(tier) {
		out[f.File] = f.Secret + "/" + f.Key + "@1"
	}
	return out
}

func TestRestartsNeeded(t *testing.T) {
	base := func() *v1alpha1.CacheTier {
		return newTier("shop", "web", v1alpha1.CacheTierSpec{L2: &v1alpha1.L2Spec{Addresses: []string{"redis:6379"}}})
	}
	with := func(edit func(*v1alpha1.CacheTier)) *v1alpha1.CacheTier {
		tier := base()
		edit(tier)
		return tier
	}
	withToken := with(func(t *v1alpha1.CacheTier) { t.Spec.Purge.TokenSecretRef = secretRef("purge", "token") })
	cases := map[string]struct {
		admitted, now *v1alpha1.CacheTier
		versions      map[string]string // nil: every reference resolved
		want          string
	}{
		"a pod admitted with the tier's Secrets needs no restart": {
			admitted: withToken, now: withToken, want: "[]",
		},
		"a token Secret named after admission needs a restart": {
			admitted: base(), now: withToken, want: "[{web-0 [spec.purge.tokenSecretRef]}]",
		},
		"a token Secret dropped after admission needs a restart (back to the generated one)": {
			admitted: withToken, now: base(), want: "[{web-0 [spec.purge.tokenSecretRef]}]",
		},
		"another key of the same Secret needs a restart": {
			admitted: withToken, now: with(func(t *v1alpha1.CacheTier) { t.Spec.Purge.TokenSecretRef = secretRef("purge", "other") }),
			want: "[{web-0 [spec.purge.tokenSecretRef]}]",
		},
		"a Redis password and CA named after admission need a restart": {
			admitted: base(), now: with(func(t *v1alpha1.CacheTier) {
				t.Spec.L2.PasswordSecretRef = secretRef("redis", "password")
				t.Spec.L2.TLS = &v1alpha1.L2TLS{Enabled: true, CASecretRef: secretRef("redis", "ca.crt")}
			}),
			want: "[{web-0 [spec.l2.tls.caSecretRef spec.l2.passwordSecretRef]}]",
		},
		"an optional Secret that still does not exist needs no restart": {
			admitted: base(), now: with(func(t *v1alpha1.CacheTier) {
				t.Spec.L2.PasswordSecretRef = secretRef("redis", "password")
				t.Spec.L2.PasswordSecretRef.Optional = ptrTo(true)
			}),
			versions: map[string]string{}, want: "[]",
		},
		"a rotated Secret's content needs no restart (the kubelet follows it)": {
			admitted: withToken, now: withToken, versions: map[string]string{inject.FilePurgeToken: "purge/token@2"}, want: "[]",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			pod := injectedWith(t, "web-0", c.admitted)
			versions := c.versions
			if versions == nil {
				versions = allResolved(c.now)
			}
			got := restartsNeeded([]*corev1.Pod{pod}, secretFilesToProject(c.now, versions))
			if fmt.Sprint(got) != c.want {
				t.Errorf("restartsNeeded = %v, want %s", got, c.want)
			}
		})
	}
}

func TestAPodNotInjectedNeedsNoRestart(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hand-labelled", Labels: map[string]string{inject.LabelTier: "web"}}}
	tier := newTier("shop", "web", v1alpha1.CacheTierSpec{})
	if got := restartsNeeded([]*corev1.Pod{pod}, secretFilesToProject(tier, nil)); len(got) != 0 {
		t.Errorf("restartsNeeded = %v for a pod without the sidecar", got)
	}
}
