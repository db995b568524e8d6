package operator

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/internal/operator/render"
)

// valuelessHash is the hash the tier's config must have: rendered without
// Secrets, plus the resourceVersions of the Secrets it uses as the API
// server reports them now. No value goes in.
func valuelessHash(t *testing.T, c client.Client, tier *v1alpha1.CacheTier) string {
	t.Helper()
	cfg, err := render.Redacted(tier)
	if err != nil {
		t.Fatal(err)
	}
	cfg.SecretVersions = map[string]string{}
	for _, f := range render.SecretFiles(tier) {
		var s corev1.Secret
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: tier.Namespace, Name: f.Secret}, &s); err != nil {
			t.Fatal(err)
		}
		cfg.SecretVersions[f.File] = f.Secret + "/" + f.Key + "@" + s.ResourceVersion
	}
	return cfg.Hash()
}

// waitReady waits for the tier to be Valid and Ready and returns it.
func waitReady(t *testing.T, c client.Client, key client.ObjectKey) *v1alpha1.CacheTier {
	t.Helper()
	var got v1alpha1.CacheTier
	eventually(t, 30*time.Second, func() error {
		if err := c.Get(context.Background(), key, &got); err != nil {
			return err
		}
		for _, ct := range []string{v1alpha1.ConditionValid, v1alpha1.ConditionReady} {
			if cond := condition(&got, ct); cond == nil || cond.Status != metav1.ConditionTrue || cond.ObservedGeneration != got.Generation {
				return errorf("%s = %+v", ct, cond)
			}
		}
		return nil
	})
	return &got
}

// TestAdmissionRefusesUnlabelledSecrets: a CacheTier may reference only
// Secrets that opted in; the refusal says how to opt in. A Secret that
// does not exist yet is allowed (it may be created after the tier).
func TestAdmissionRefusesUnlabelledSecrets(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	plain := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-credentials"}, StringData: map[string]string{"password": "not-for-caches"}}
	if err := c.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	optional := secretRef("db-credentials", "password")
	optional.Optional = new(bool)
	*optional.Optional = true
	cases := map[string]v1alpha1.CacheTierSpec{
		"a Redis password from an unlabelled Secret is refused": {
			L2: &v1alpha1.L2Spec{Addresses: []string{"attacker.example:6379"}, PasswordSecretRef: secretRef("db-credentials", "password")},
		},
		"an optional reference to an unlabelled Secret is refused too": {
			Purge: v1alpha1.PurgeSpec{TokenSecretRef: optional},
		},
		"a Redis CA from an unlabelled Secret is refused": {
			L2: &v1alpha1.L2Spec{Addresses: []string{"redis:6379"}, TLS: &v1alpha1.L2TLS{Enabled: true, CASecretRef: secretRef("db-credentials", "password")}},
		},
	}
	i := 0
	for name, spec := range cases {
		t.Run(name, func(t *testing.T) {
			i++
			err := c.Create(ctx, newTier(ns, "t"+string(rune('a'+i)), spec))
			want := "kubectl label secret db-credentials tiercache.io/allow-reference=true -n " + ns
			if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want a 422 saying %q", err, want)
			}
		})
	}

	// A Secret that does not exist yet is allowed at admission.
	if err := c.Create(ctx, newTier(ns, "later", v1alpha1.CacheTierSpec{Purge: v1alpha1.PurgeSpec{TokenSecretRef: secretRef("not-yet", "token")}})); err != nil {
		t.Fatalf("a tier naming a Secret that does not exist yet was refused: %v", err)
	}
	// Once labelled, the Secret may be referenced.
	plain.Labels = map[string]string{inject.LabelAllowReference: "true"}
	if err := c.Update(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, newTier(ns, "labelled", cases["a Redis password from an unlabelled Secret is refused"])); err != nil {
		t.Fatalf("a tier naming a labelled Secret was refused: %v", err)
	}
}

// TestPodsDoNotMountUnlabelledSecrets: a tier admitted while its Secret did
// not exist cannot make pods mount it once it is created unlabelled.
func TestPodsDoNotMountUnlabelledSecrets(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	tier := newTier(ns, "pages", v1alpha1.CacheTierSpec{
		L2: &v1alpha1.L2Spec{Addresses: []string{"attacker.example:6379"}, PasswordSecretRef: secretRef("db", "password")},
	})
	if err := c.Create(ctx, tier); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, StringData: map[string]string{"password": "p"}}); err != nil {
		t.Fatal(err)
	}
	err := c.Create(ctx, appPod(ns, "web", map[string]string{inject.AnnotationTier: "pages"}))
	want := "kubectl label secret db tiercache.io/allow-reference=true -n " + ns
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a pod of a tier whose Secret is unlabelled: %v, want a refusal saying %q", err, want)
	}
}

// TestTheCacheHoldsOnlyLabelledSecrets builds the operator's manager and
// reads Secrets through its cached client, by metadata (as the operator
// does) and whole: an unlabelled Secret is not there, a labelled one is,
// and labelling the first brings it in.
func TestTheCacheHoldsOnlyLabelledSecrets(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	plain := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}, StringData: map[string]string{"k": "v"}}
	for _, s := range []*corev1.Secret{plain, labelledSecret(ns, "opted-in", map[string]string{"k": "v"})} {
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	o, err := ParseArgs([]string{"--namespace=" + operatorNS, "--metrics-bind-address=0", "--health-probe-bind-address=0", "--leader-elect=false", "--sidecar-image=img"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := newManager(cluster.cfg, o, newLogger(logSink()), true)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the manager did not stop within 30s")
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	cached := mgr.GetClient()
	found := func(name string) (meta, whole bool) {
		t.Helper()
		key := client.ObjectKey{Namespace: ns, Name: name}
		errM := cached.Get(ctx, key, secretMeta())
		errW := cached.Get(ctx, key, &corev1.Secret{})
		for _, err := range []error{errM, errW} {
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		return errM == nil, errW == nil
	}
	// The informers start on the first Get: wait for the labelled one.
	eventually(t, 30*time.Second, func() error {
		if m, w := found("opted-in"); !m || !w {
			return errorf("the labelled Secret is not in the cache (metadata %t, whole %t)", m, w)
		}
		return nil
	})
	if m, w := found("plain"); m || w {
		t.Fatalf("the unlabelled Secret is in the cache (metadata %t, whole %t)", m, w)
	}
	plain.Labels = map[string]string{inject.LabelAllowReference: "true"}
	if err := c.Update(ctx, plain); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if m, _ := found("plain"); !m {
			return errorf("the Secret is not in the cache after it was labelled")
		}
		return nil
	})
}

// TestTheGeneratedSecret: the operator creates <tier>-tiercache per tier
// (owned by it, labelled, random values), recreates it when deleted,
// follows an edit (the configHash changes, holding no value), and leaves a
// Secret of that name it did not generate alone, saying so.
func TestTheGeneratedSecret(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()

	// A Secret squatting the name the tier "squat" would get.
	squat := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "squat-tiercache"}, StringData: map[string]string{"purge-token": "mine"}}
	if err := c.Create(ctx, squat); err != nil {
		t.Fatal(err)
	}
	tiers := map[string]*v1alpha1.CacheTier{}
	for _, name := range []string{"a", "b", "squat"} {
		tiers[name] = newTier(ns, name, v1alpha1.CacheTierSpec{})
		if err := c.Create(ctx, tiers[name]); err != nil {
			t.Fatal(err)
		}
	}
	generatedOf := func(tier string) *corev1.Secret {
		t.Helper()
		var s corev1.Secret
		eventually(t, 30*time.Second, func() error {
			return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: tier + "-tiercache"}, &s)
		})
		return &s
	}
	values := map[string]string{}
	for _, name := range []string{"a", "b"} {
		tier := waitReady(t, c, client.ObjectKeyFromObject(tiers[name]))
		s := generatedOf(name)
		if s.Labels[inject.LabelAllowReference] != "true" || s.Labels[inject.LabelGeneratedFor] != name {
			t.Errorf("%s: labels %v", s.Name, s.Labels)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != tier.UID || s.OwnerReferences[0].Kind != "CacheTier" ||
			s.OwnerReferences[0].Controller == nil || !*s.OwnerReferences[0].Controller {
			t.Errorf("%s: owner references %+v, want the CacheTier %s", s.Name, s.OwnerReferences, tier.UID)
		}
		for _, k := range []string{inject.KeyPurgeToken, inject.KeyInvalidationKey} {
			v := string(s.Data[k])
			if b, err := hex.DecodeString(v); err != nil || len(b) != 32 {
				t.Errorf("%s %s = %q, want 32 bytes in hex", s.Name, k, v)
			}
			if other, dup := values[v]; dup {
				t.Errorf("%s %s repeats %s", s.Name, k, other)
			}
			values[v] = s.Name + " " + k
		}
		if want := valuelessHash(t, c, tier); tier.Status.ConfigHash != want {
			t.Errorf("%s: configHash %s, the valueless render hashes %s", name, tier.Status.ConfigHash, want)
		}
	}

	// Deleted: created anew, with new values.
	old := generatedOf("a")
	if err := c.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		var s corev1.Secret
		if err := c.Get(ctx, client.ObjectKeyFromObject(old), &s); err != nil {
			return err
		}
		if s.UID == old.UID {
			return errorf("not deleted yet")
		}
		if bytes.Equal(s.Data[inject.KeyPurgeToken], old.Data[inject.KeyPurgeToken]) {
			t.Error("the recreated Secret has the old purge token")
		}
		return nil
	})

	// Edited (a user rotates the token): the operator keeps the edit and
	// the tier's hash follows the new resourceVersion.
	b := generatedOf("b")
	before := waitReady(t, c, client.ObjectKeyFromObject(tiers["b"])).Status.ConfigHash
	b.Data[inject.KeyPurgeToken] = []byte("a-token-chosen-by-its-owner-0123")
	if err := c.Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		var tier v1alpha1.CacheTier
		if err := c.Get(ctx, client.ObjectKeyFromObject(tiers["b"]), &tier); err != nil {
			return err
		}
		if tier.Status.ConfigHash == before {
			return errorf("configHash unchanged after the rotation")
		}
		if want := valuelessHash(t, c, &tier); tier.Status.ConfigHash != want {
			return errorf("configHash %s, the valueless render hashes %s", tier.Status.ConfigHash, want)
		}
		return nil
	})
	if got := generatedOf("b"); string(got.Data[inject.KeyPurgeToken]) != "a-token-chosen-by-its-owner-0123" {
		t.Errorf("the operator overwrote the edited token: %q", got.Data[inject.KeyPurgeToken])
	}

	// The squatted name: not touched, and the tier says why it is not
	// ready.
	eventually(t, 30*time.Second, func() error {
		var tier v1alpha1.CacheTier
		if err := c.Get(ctx, client.ObjectKeyFromObject(tiers["squat"]), &tier); err != nil {
			return err
		}
		v := condition(&tier, v1alpha1.ConditionValid)
		if v == nil || v.Status != metav1.ConditionFalse || v.Reason != v1alpha1.ReasonSecretConflict ||
			!strings.Contains(v.Message, `Secret "squat-tiercache" exists but was not generated for this CacheTier`) {
			return errorf("Valid = %+v", v)
		}
		return nil
	})
	var after corev1.Secret
	if err := c.Get(ctx, client.ObjectKeyFromObject(squat), &after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != squat.ResourceVersion || len(after.OwnerReferences) != 0 {
		t.Errorf("the operator changed a Secret it did not generate: %+v", after.ObjectMeta)
	}
}

// TestXDSCarriesNoSecretValue fetches a tier's resource from the
// operator's xDS server as a sidecar would and searches its bytes for the
// values of the tier's Secrets: none is there, their resourceVersions are.
func TestXDSCarriesNoSecretValue(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const password, token = "known-redis-password-4711", "known-purge-token-0815-abcdef"
	if err := c.Create(ctx, labelledSecret(ns, "redis", map[string]string{"password": password, "ca.crt": "-----BEGIN CERTIFICATE-----\nknown-ca\n"})); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, labelledSecret(ns, "purge", map[string]string{"token": token})); err != nil {
		t.Fatal(err)
	}
	tier := newTier(ns, "web", v1alpha1.CacheTierSpec{
		L2: &v1alpha1.L2Spec{Addresses: []string{"redis:6379"}, PasswordSecretRef: secretRef("redis", "password"),
			TLS: &v1alpha1.L2TLS{Enabled: true, CASecretRef: secretRef("redis", "ca.crt")}},
		Purge: v1alpha1.PurgeSpec{TokenSecretRef: secretRef("purge", "token")},
	})
	if err := c.Create(ctx, tier); err != nil {
		t.Fatal(err)
	}
	ready := waitReady(t, c, client.ObjectKeyFromObject(tier))
	var gen corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-tiercache"}, &gen); err != nil {
		t.Fatal(err)
	}

	// As the tier's own sidecar: an injected pod with its token.
	pod := createPod(t, ns, "web-0", "web")
	key := ns + "/web"
	resp, err := xdsAttempt(t, xdsConn(t), podToken(t, pod, xdsAudience), ns+"/web-0", key, "")
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetVersionInfo() != ready.Status.ConfigHash {
		t.Errorf("xDS version %s, status.configHash %s", resp.GetVersionInfo(), ready.Status.ConfigHash)
	}
	wire, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"the Redis password": password, "the purge token": token, "the CA": "known-ca",
		"the generated purge token": string(gen.Data[inject.KeyPurgeToken]), "the invalidation key": string(gen.Data[inject.KeyInvalidationKey])}
	for what, v := range secrets {
		if bytes.Contains(wire, []byte(v)) {
			t.Errorf("the xDS response carries %s", what)
		}
	}
	var redis corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "redis"}, &redis); err != nil {
		t.Fatal(err)
	}
	if want := "redis/password@" + redis.ResourceVersion; !bytes.Contains(wire, []byte(want)) {
		t.Errorf("the xDS response lacks the password's version %q", want)
	}
}
