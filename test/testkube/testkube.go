// Package testkube holds what the envtest-based tests of several packages
// (operator, chart, e2e) need around a real API server: an admin or
// service-account kubeconfig for helm and kubectl, and the parts of a
// kubelet they must play: projecting a Secret (or a projected volume of
// Secrets) into a directory, and a pod's ServiceAccount token. It is a
// test harness (only _test.go files import it), not part of the product.
package testkube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// ServiceAccountToken requests a token of ServiceAccount ns/name (made
// when missing) for the API server's own audience, unbound, as a
// kubelet mounts it at /var/run/secrets/kubernetes.io/serviceaccount.
func ServiceAccountToken(ctx context.Context, c client.Client, ns, name string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	tr := &authnv1.TokenRequest{}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("token of %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
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

// ProjectVolume plays the kubelet for a projected volume of pod: it
// writes the items of src's Secret sources and its ServiceAccount tokens
// (from PodToken, requested again at 80% of their lifetime, as the
// kubelet does) into dir the way the kubelet's atomic writer does (the
// files in a fresh hidden directory, then the symlink ..data swapped to
// it in one rename, each file a symlink through ..data), and again
// whenever a projected value changes, until ctx ends. A missing optional
// Secret or key is left out; a missing required one waits, as a kubelet
// would. The first projection is done before it returns (or ctx ends).
func ProjectVolume(ctx context.Context, c client.Client, pod *corev1.Pod, src *corev1.ProjectedVolumeSource, dir string) {
	namespace := pod.Namespace
	type token struct {
		value   []byte
		refresh time.Time
	}
	tokens := map[int]token{} // by source index
	project := func() (map[string][]byte, bool) {
		files := map[string][]byte{}
		for i, s := range src.Sources {
			if sat := s.ServiceAccountToken; sat != nil {
				tok, ok := tokens[i]
				if !ok || time.Now().After(tok.refresh) {
					ttl := time.Hour
					if sat.ExpirationSeconds != nil {
						ttl = time.Duration(*sat.ExpirationSeconds) * time.Second
					}
					v, err := PodToken(ctx, c, pod, sat.Audience, ttl)
					if err != nil {
						return nil, false
					}
					tok = token{value: []byte(v), refresh: time.Now().Add(ttl * 8 / 10)}
					tokens[i] = tok
				}
				files[sat.Path] = tok.value
				continue
			}
			if s.Secret == nil {
				continue
			}
			optional := s.Secret.Optional != nil && *s.Secret.Optional
			var sec corev1.Secret
			if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: s.Secret.Name}, &sec); err != nil {
				if optional {
					continue
				}
				return nil, false
			}
			for _, it := range s.Secret.Items {
				v, ok := sec.Data[it.Key]
				if !ok {
					if optional {
						continue
					}
					return nil, false
				}
				files[it.Path] = v
			}
		}
		return files, true
	}
	var last map[string][]byte
	var gen int
	step := func() {
		files, ok := project()
		if !ok || mapsEqual(files, last) {
			return
		}
		gen++
		if err := swapData(dir, gen, files); err == nil {
			last = files
		}
	}
	step()
	for last == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		step()
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			step()
		}
	}()
}

// swapData writes files into dir/..<gen>, points dir/..data at it with one
// rename, links each file through ..data and removes the previous
// generation.
func swapData(dir string, gen int, files map[string][]byte) error {
	name := fmt.Sprintf("..%d", gen)
	ts := filepath.Join(dir, name)
	if err := os.Mkdir(ts, 0o755); err != nil {
		return err
	}
	for p, v := range files {
		if err := os.WriteFile(filepath.Join(ts, p), v, 0o644); err != nil {
			return err
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(name, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	for p := range files {
		link := filepath.Join(dir, p)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", p), link); err != nil {
			return err
		}
	}
	if gen > 1 {
		_ = os.RemoveAll(filepath.Join(dir, fmt.Sprintf("..%d", gen-1)))
	}
	return nil
}

func mapsEqual(a, b map[string][]byte) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || string(v) != string(w) {
			return false
		}
	}
	return true
}
