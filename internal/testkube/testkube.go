// Package testkube holds what the envtest-based tests of several packages
// (operator, chart, e2e) need around a real API server: an admin or
// service-account kubeconfig for helm and kubectl, and the parts of a
// kubelet they must play: projecting a Secret into a directory, and a
// pod's ServiceAccount token.
package testkube

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Admin is a user in system:masters.
var Admin = envtest.User{Name: "admin", Groups: []string{"system:masters"}}

// ServiceAccount is the user a ServiceAccount's token would authenticate
// as: RBAC bindings to the ServiceAccount apply to it.
func ServiceAccount(namespace, name string) envtest.User {
	return envtest.User{
		Name:   "system:serviceaccount:" + namespace + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
}

// Kubeconfig adds u to env's API server and writes a kubeconfig for it
// into a test directory.
func Kubeconfig(t testing.TB, env *envtest.Environment, u envtest.User) string {
	t.Helper()
	user, err := env.AddUser(u, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), strings.ReplaceAll(u.Name, ":", "_")+".kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// ProjectSecret writes the Secret's keys as files into dir whenever they
// change, like a kubelet's secret volume, until ctx ends. Writes are
// atomic (temp file, then rename).
func ProjectSecret(ctx context.Context, c client.Reader, key client.ObjectKey, dir string) {
	seen := map[string]string{}
	for {
		var s corev1.Secret
		if err := c.Get(ctx, key, &s); err == nil {
			for k, v := range s.Data {
				if seen[k] == string(v) {
					continue
				}
				tmp := filepath.Join(dir, "."+k+".tmp")
				if os.WriteFile(tmp, v, 0o600) == nil && os.Rename(tmp, filepath.Join(dir, k)) == nil {
					seen[k] = string(v)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// PodToken requests a token of the pod's ServiceAccount bound to the pod,
// for audience, valid for ttl: what a kubelet writes into a projected
// serviceAccountToken volume. c needs the ServiceAccount and Pod types in
// its scheme (client-go's does).
func PodToken(ctx context.Context, c client.Client, pod *corev1.Pod, audience string, ttl time.Duration) (string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	secs := int64(ttl / time.Second)
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences:         []string{audience},
		ExpirationSeconds: &secs,
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: sa}}
	if err := c.SubResource("token").Create(ctx, account, tr); err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// WriteToken writes tok to path atomically (temp file, then rename), as a
// kubelet refreshes a projected token.
func WriteToken(t testing.TB, path, tok string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
