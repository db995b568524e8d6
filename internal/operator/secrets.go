package operator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/internal/operator/render"
)

// secretLookup finds Secrets by metadata only: no Secret value is ever
// read by the operator. cache is the manager's client, whose cache holds
// only Secrets labelled tiercache.io/allow-reference=true (newManager), so
// through it an unlabelled Secret does not exist. api, when set, is asked
// about a Secret the cache does not hold: the webhooks use it to tell an
// unlabelled Secret from a missing one, and to see a Secret created a
// moment ago. known holds Secrets this reconcile just created (the cache
// has not seen them yet).
type secretLookup struct {
	cache client.Reader
	api   client.Reader
	known map[string]metav1.Object
}

var _ render.Secrets = secretLookup{}

func (s secretLookup) SecretMeta(ctx context.Context, ns, name string) (metav1.Object, error) {
	if m, ok := s.known[name]; ok && m.GetNamespace() == ns {
		return m, nil
	}
	key := types.NamespacedName{Namespace: ns, Name: name}
	m := secretMeta()
	err := s.cache.Get(ctx, key, m)
	if apierrors.IsNotFound(err) && s.api != nil {
		m = secretMeta()
		err = s.api.Get(ctx, key, m)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("secret %s: %w", key, render.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s: %w", key, err)
	}
	return m, nil
}

// secretMeta is an empty Secret metadata object: reads through it fetch
// (and cache) metadata only, never data.
func secretMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

// generatedSecret is the tier's Secret <tier>-tiercache as the operator
// creates it: owned by the tier (garbage collected with it; no
// blockOwnerDeletion, which would need update on cachetiers/finalizers),
// labelled so CacheTiers may use it and so the operator recognises it,
// with a random purge token and invalidation key (32 bytes each, hex).
func generatedSecret(tier *v1alpha1.CacheTier, random io.Reader) (*corev1.Secret, error) {
	if random == nil {
		random = rand.Reader
	}
	data := map[string][]byte{}
	for _, k := range []string{inject.KeyPurgeToken, inject.KeyInvalidationKey} {
		b := make([]byte, 32)
		if _, err := io.ReadFull(random, b); err != nil {
			return nil, fmt.Errorf("generating %s: %w", k, err)
		}
		data[k] = []byte(hex.EncodeToString(b))
	}
	gvk := v1alpha1.GroupVersion.WithKind("CacheTier")
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: tier.Namespace,
			Name:      inject.GeneratedSecretName(tier.Name),
			Labels: map[string]string{
				inject.LabelAllowReference: "true",
				inject.LabelGeneratedFor:   tier.Name,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: gvk.GroupVersion().String(),
				Kind:       gvk.Kind,
				Name:       tier.Name,
				UID:        tier.UID,
				Controller: ptr.To(true),
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}, nil
}

// ensureGeneratedSecret creates the tier's generated Secret when the cache
// holds none, and returns its metadata for render (nil: the cache holds
// one). A Secret of that name that the cache does not hold (unlabelled) is
// read by metadata from api and returned as it is: render then reports
// the conflict. It never updates or deletes a Secret: a user rotates by
// editing the values or by deleting the Secret, which is created anew.
func ensureGeneratedSecret(ctx context.Context, c client.Client, api client.Reader, tier *v1alpha1.CacheTier, random io.Reader) (metav1.Object, error) {
	key := types.NamespacedName{Namespace: tier.Namespace, Name: inject.GeneratedSecretName(tier.Name)}
	err := c.Get(ctx, key, secretMeta())
	if err == nil || !apierrors.IsNotFound(err) {
		return nil, err
	}
	sec, err := generatedSecret(tier, random)
	if err != nil {
		return nil, err
	}
	err = c.Create(ctx, sec)
	switch {
	case err == nil:
		sec.Data = nil // only its metadata is used from here on
		return sec, nil
	case !apierrors.IsAlreadyExists(err):
		return nil, fmt.Errorf("creating Secret %s: %w", key, err)
	}
	// Someone else's Secret without our labels, or ours from a moment
	// ago that the cache has not seen yet.
	m := secretMeta()
	if err := api.Get(ctx, key, m); err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", key, err)
	}
	return m, nil
}
