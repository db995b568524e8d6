package render

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
)

// Secrets finds a Secret's metadata (labels, resourceVersion) by name; a
// missing Secret is an error wrapping ErrNotFound. Rendering needs nothing
// else of a Secret: values never enter the config, its hash or the wire.
type Secrets interface {
	SecretMeta(ctx context.Context, namespace, name string) (metav1.Object, error)
}

// Reasons a Secret reference does not resolve, wrapped in a *SecretError.
var (
	// ErrNotFound: the Secret does not exist (or, through a reader that
	// sees only labelled Secrets, is not labelled).
	ErrNotFound = errors.New("not found")
	// ErrNotAllowed: the Secret exists without the label
	// tiercache.io/allow-reference=true.
	ErrNotAllowed = errors.New("not labelled " + inject.LabelAllowReference + "=true")
	// ErrNotGenerated: a Secret named like the tier's generated one exists
	// without tiercache.io/generated-for=<tier>; the operator leaves it
	// alone.
	ErrNotGenerated = errors.New("not generated for this CacheTier")
)

// SecretFile is one file of the sidecar's secrets directory and where it
// comes from.
type SecretFile struct {
	// File is the name in inject.SecretsDir (inject.FileRedisPassword...).
	File string
	// Field is the CacheTier field holding the reference, "" for the
	// generated Secret.
	Field    string
	Secret   string
	Key      string
	Optional bool
}

// Generated reports whether f comes from the tier's generated Secret.
func (f SecretFile) Generated() bool { return f.Field == "" }

// SecretFiles lists the files of the tier's secrets directory: the
// referenced Secrets' keys, then the generated Secret's invalidation key
// and, when the tier names no token Secret, its purge token.
func SecretFiles(tier *v1alpha1.CacheTier) []SecretFile {
	var out []SecretFile
	add := func(file, fieldPath string, ref *corev1.SecretKeySelector) {
		if ref != nil {
			out = append(out, SecretFile{File: file, Field: fieldPath, Secret: ref.Name, Key: ref.Key, Optional: ref.Optional != nil && *ref.Optional})
		}
	}
	if l2 := tier.Spec.L2; l2 != nil {
		add(inject.FileRedisPassword, "spec.l2.passwordSecretRef", l2.PasswordSecretRef)
		if l2.TLS != nil {
			add(inject.FileRedisCACert, "spec.l2.tls.caSecretRef", l2.TLS.CASecretRef)
		}
	}
	add(inject.FilePurgeToken, "spec.purge.tokenSecretRef", tier.Spec.Purge.TokenSecretRef)
	gen := inject.GeneratedSecretName(tier.Name)
	out = append(out, SecretFile{File: inject.FileInvalidationKey, Secret: gen, Key: inject.KeyInvalidationKey})
	if tier.Spec.Purge.TokenSecretRef == nil {
		out = append(out, SecretFile{File: inject.FilePurgeToken, Secret: gen, Key: inject.KeyPurgeToken})
	}
	return out
}

// SecretVersions resolves the tier's secret files to
// "<secret>/<key>@<resourceVersion>" (tierconfig.Config.SecretVersions).
// A Secret must carry the allow-reference label (the generated one also
// generated-for=<tier>). An optional reference that does not resolve is
// left out; every other failure is a *SecretError, all of them joined.
// The versions resolved so far come back with the error.
func SecretVersions(ctx context.Context, tier *v1alpha1.CacheTier, s Secrets) (map[string]string, error) {
	out := map[string]string{}
	var errs []error
	for _, f := range SecretFiles(tier) {
		rv, err := ResolveSecret(ctx, tier, s, f)
		switch {
		case err == nil:
			out[f.File] = f.Secret + "/" + f.Key + "@" + rv
		case f.Optional && (errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotAllowed)):
		default:
			errs = append(errs, &SecretError{File: f, Namespace: tier.Namespace, Tier: tier.Name, Err: err})
		}
	}
	return out, errors.Join(errs...)
}

// ResolveSecret returns the resourceVersion of f's Secret, or why it may
// not be used: ErrNotFound, ErrNotAllowed, ErrNotGenerated or the lookup's
// own error.
func ResolveSecret(ctx context.Context, tier *v1alpha1.CacheTier, s Secrets, f SecretFile) (string, error) {
	m, err := s.SecretMeta(ctx, tier.Namespace, f.Secret)
	if err != nil {
		return "", err
	}
	labels := m.GetLabels()
	if f.Generated() && labels[inject.LabelGeneratedFor] != tier.Name {
		return "", ErrNotGenerated
	}
	if labels[inject.LabelAllowReference] != "true" {
		return "", ErrNotAllowed
	}
	return m.GetResourceVersion(), nil
}

// SecretError is a Secret of the tier that does not resolve. Its message
// says how to fix it and never holds a value.
type SecretError struct {
	File      SecretFile
	Namespace string
	Tier      string
	Err       error
}

func (e *SecretError) Error() string {
	name, ns := e.File.Secret, e.Namespace
	label := fmt.Sprintf("kubectl label secret %s %s=true -n %s", name, inject.LabelAllowReference, ns)
	if e.File.Generated() {
		switch {
		case errors.Is(e.Err, ErrNotGenerated):
			return fmt.Sprintf("Secret %q exists but was not generated for this CacheTier (it lacks the label %s=%s); the operator leaves it alone: delete or rename it and the operator creates its own",
				name, inject.LabelGeneratedFor, e.Tier)
		case errors.Is(e.Err, ErrNotFound):
			return fmt.Sprintf("the generated Secret %q does not exist yet; the operator creates it", name)
		case errors.Is(e.Err, ErrNotAllowed):
			return fmt.Sprintf("the generated Secret %q lost its label %s=true: put it back (%s) or delete the Secret and the operator creates a new one",
				name, inject.LabelAllowReference, label)
		}
		return fmt.Sprintf("the generated Secret %q: %v", name, e.Err)
	}
	switch {
	case errors.Is(e.Err, ErrNotAllowed):
		return fmt.Sprintf("%s: Secret %q is not labelled %s=true, so CacheTiers may not use it; if this tier may use it: %s",
			e.File.Field, name, inject.LabelAllowReference, label)
	case errors.Is(e.Err, ErrNotFound):
		return fmt.Sprintf("%s: Secret %q not found in namespace %q, or not labelled %s=true; create it (key %q) and label it: %s",
			e.File.Field, name, ns, inject.LabelAllowReference, e.File.Key, label)
	}
	return fmt.Sprintf("%s: Secret %q: %v", e.File.Field, name, e.Err)
}

func (e *SecretError) Unwrap() error { return e.Err }

// SecretErrors returns the *SecretErrors in err.
func SecretErrors(err error) []*SecretError {
	var out []*SecretError
	var walk func(error)
	walk = func(err error) {
		var se *SecretError
		switch e := err.(type) {
		case nil:
		case interface{ Unwrap() []error }:
			for _, e := range e.Unwrap() {
				walk(e)
			}
		default:
			if errors.As(err, &se) {
				out = append(out, se)
			}
		}
	}
	walk(err)
	return out
}

// Transient reports whether err holds a Secret lookup that failed for a
// reason other than the Secret's absence or labels (worth a retry).
func Transient(err error) bool {
	for _, se := range SecretErrors(err) {
		if !errors.Is(se.Err, ErrNotFound) && !errors.Is(se.Err, ErrNotAllowed) && !errors.Is(se.Err, ErrNotGenerated) {
			return true
		}
	}
	return false
}
