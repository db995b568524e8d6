package operator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/testkube"
)

// TestSelfManagedCertificates runs an operator with --cert-mode=self on an
// API server of its own whose webhook registrations carry no caBundle:
// the operator must create its CA and serving certificate, store them in
// its Secret, patch both registrations' caBundle, and then serve
// admissions that the API server verifies against that CA.
func TestSelfManagedCertificates(t *testing.T) {
	needCluster(t)
	env := &envtest.Environment{CRDDirectoryPaths: cluster.env.CRDDirectoryPaths, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := admissionv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "tc-certs"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	port := freePort(t)
	base := "https://localhost:" + strconv.Itoa(port)
	fail := admissionv1.Fail
	none := admissionv1.SideEffectClassNone
	validate := &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "tc-certs-validate"},
		Webhooks: []admissionv1.ValidatingWebhook{{
			Name:                    "validate.cachetier.tiercache.io",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			FailurePolicy:           &fail,
			ClientConfig:            admissionv1.WebhookClientConfig{URL: ptrTo(base + CacheTierValidatePath)},
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
				Rule:       admissionv1.Rule{APIGroups: []string{"tiercache.io"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"cachetiers"}},
			}},
		}},
	}
	mutate := &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "tc-certs-inject"},
		Webhooks: []admissionv1.MutatingWebhook{{
			Name:                    "inject.tiercache.io",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			FailurePolicy:           &fail,
			ClientConfig:            admissionv1.WebhookClientConfig{URL: ptrTo(base + PodMutatePath)},
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			MatchConditions: []admissionv1.MatchCondition{{
				Name: "annotated", Expression: "has(object.metadata.annotations) && 'tiercache.io/tier' in object.metadata.annotations",
			}},
		}},
	}
	for _, o := range []client.Object{validate, mutate} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	// Before the operator runs, the API server cannot reach a webhook:
	// failurePolicy Fail refuses tiers.
	if err := c.Create(ctx, newTier("default", "early", v1alpha1.CacheTierSpec{})); err == nil {
		t.Fatal("a tier was admitted with no webhook serving")
	}

	certDir := t.TempDir()
	opCtx, stop := context.WithCancel(ctx)
	// In a cluster the kubelet projects the certificate Secret into the
	// operator's pod at --webhook-cert-dir (the chart mounts it). There is
	// no kubelet here: this goroutine plays its part.
	kubelet := make(chan struct{})
	go func() {
		defer close(kubelet)
		testkube.ProjectSecret(opCtx, c, client.ObjectKey{Namespace: ns, Name: "tc-certs-secret"}, certDir)
	}()
	done := make(chan error, 1)
	go func() {
		done <- RunWith(opCtx, []string{
			"--namespace=" + ns,
			"--cert-mode=self",
			"--cert-secret=tc-certs-secret",
			"--webhook-host=127.0.0.1",
			"--webhook-port=" + strconv.Itoa(port),
			"--webhook-cert-dir=" + certDir,
			"--mutating-webhook-configuration=tc-certs-inject",
			"--validating-webhook-configuration=tc-certs-validate",
			"--leader-elect=false",
			"--metrics-bind-address=0",
			"--health-probe-bind-address=127.0.0.1:0",
			"--xds-listen=",
		}, Env{Getenv: func(string) string { return "" }, Stderr: logSink(), RestConfig: cfg, CertExtraDNSNames: []string{"localhost"}, SkipNameValidation: true})
	}()
	t.Cleanup(func() {
		stop()
		<-kubelet
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("operator: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("operator did not stop within 30s")
		}
	})

	eventually(t, 60*time.Second, func() error {
		var s corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tc-certs-secret"}, &s); err != nil {
			return err
		}
		if len(s.Data["ca.crt"]) == 0 || len(s.Data["tls.crt"]) == 0 || len(s.Data["tls.key"]) == 0 {
			return fmt.Errorf("secret keys %v", keys(s.Data))
		}
		var v admissionv1.ValidatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKeyFromObject(validate), &v); err != nil {
			return err
		}
		var m admissionv1.MutatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKeyFromObject(mutate), &m); err != nil {
			return err
		}
		if string(v.Webhooks[0].ClientConfig.CABundle) != string(s.Data["ca.crt"]) || string(m.Webhooks[0].ClientConfig.CABundle) != string(s.Data["ca.crt"]) {
			return errors.New("caBundle not injected into both webhook configurations")
		}
		return nil
	})

	// The API server now verifies the operator's certificate: a valid
	// tier is admitted and an invalid one refused by the webhook itself.
	eventually(t, 60*time.Second, func() error {
		return c.Create(ctx, newTier("default", "pages", v1alpha1.CacheTierSpec{}))
	})
	err = c.Create(ctx, newTier("default", "bad", v1alpha1.CacheTierSpec{L1: v1alpha1.L1Spec{MaxSize: qty("512Ki")}}))
	if err == nil || !strings.Contains(err.Error(), "admission webhook") || !strings.Contains(err.Error(), "spec.l1.maxSize") {
		t.Errorf("an invalid tier: %v", err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }
