// Package render turns a CacheTier into the sidecar's config model
// (tierconfig.Config): the one code path that the admission webhook, the
// controller and the pod injector share, so that a tier is judged and
// rendered the same way everywhere, and the same way the sidecar judges it
// (tierconfig.Validate).
//
// Secrets are resolved through a Secrets interface. Rendering without one
// (Redacted) leaves the secret-bearing fields empty: that is the form the
// admission webhook validates (a Secret may be created after the tier) and
// the form placed in pod specs (secrets reach the container through
// secretKeyRef environment variables, never in plain text).
package render

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Secrets resolves a Secret key in a namespace.
type Secrets interface {
	SecretValue(ctx context.Context, namespace string, ref corev1.SecretKeySelector) (string, error)
}

// SecretError is a Secret reference that could not be resolved: the
// Secret or its key is missing, or reading it failed.
type SecretError struct {
	// Field is the CacheTier field holding the reference
	// ("spec.l2.passwordSecretRef").
	Field string
	Ref   corev1.SecretKeySelector
	Err   error
}

func (e *SecretError) Error() string {
	return fmt.Sprintf("%s: Secret %q key %q: %v", e.Field, e.Ref.Name, e.Ref.Key, e.Err)
}

func (e *SecretError) Unwrap() error { return e.Err }

// ErrNotFound is returned (wrapped) by Secrets implementations when the
// Secret or its key does not exist. Only then does an optional reference
// render as unset; any other error fails the render.
var ErrNotFound = errors.New("not found")

// KeyPrefix is the Redis key prefix of a tier, as DESIGN.md fixes it:
// "tc:<namespace>/<tier>:", always derived (the CacheTier cannot set it).
func KeyPrefix(namespace, tier string) string {
	return tierconfig.KeyPrefix(namespace, tier)
}

// Redacted renders the tier without reading Secrets and validates the
// result. Secret-bearing fields (the Redis password and CA, the purge
// token) are empty.
func Redacted(tier *v1alpha1.CacheTier) (tierconfig.Config, error) {
	return Config(context.Background(), tier, nil)
}

// Config renders the tier with defaults filled, resolving Secret
// references through s (nil: Redacted), and validates it. A spec the
// sidecar would refuse returns an error for which FieldErrors gives the
// CacheTier fields; an unresolvable Secret returns a *SecretError.
func Config(ctx context.Context, tier *v1alpha1.CacheTier, s Secrets) (tierconfig.Config, error) {
	c, err := convert(tier.Spec)
	if err != nil {
		return tierconfig.Config{}, err
	}
	// The derived prefix travels with the config so that a sidecar
	// handed another tier's config refuses it (it checks the prefix
	// against its own namespace and tier).
	if len(c.L2.Addresses) > 0 {
		c.L2.KeyPrefix = KeyPrefix(tier.Namespace, tier.Name)
	}
	if s != nil {
		if err := resolveSecrets(ctx, &c, tier, s); err != nil {
			return tierconfig.Config{}, err
		}
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return tierconfig.Config{}, err
	}
	return c, nil
}

func resolveSecrets(ctx context.Context, c *tierconfig.Config, tier *v1alpha1.CacheTier, s Secrets) error {
	get := func(fieldPath string, ref *corev1.SecretKeySelector, dst *string) error {
		if ref == nil {
			return nil
		}
		v, err := s.SecretValue(ctx, tier.Namespace, *ref)
		if err != nil {
			if ref.Optional != nil && *ref.Optional && errors.Is(err, ErrNotFound) {
				return nil
			}
			return &SecretError{Field: fieldPath, Ref: *ref, Err: err}
		}
		*dst = v
		return nil
	}
	if l2 := tier.Spec.L2; l2 != nil {
		if err := get("spec.l2.passwordSecretRef", l2.PasswordSecretRef, &c.L2.Password); err != nil {
			return err
		}
		if l2.TLS != nil {
			if err := get("spec.l2.tls.caSecretRef", l2.TLS.CASecretRef, &c.L2.CACert); err != nil {
				return err
			}
		}
	}
	return get("spec.purge.tokenSecretRef", tier.Spec.Purge.TokenSecretRef, &c.Purge.Token)
}

// FieldErrors maps a Config error onto the CacheTier's fields, for an
// admission response or a status message. Errors that are not field
// errors come back as one error on spec.
func FieldErrors(err error) field.ErrorList {
	if err == nil {
		return nil
	}
	var out field.ErrorList
	for _, fe := range tierconfig.FieldErrors(err) {
		out = append(out, field.Invalid(specPath(fe.Field), field.OmitValueType{}, fe.Message))
	}
	var se *SecretError
	if errors.As(err, &se) {
		out = append(out, field.Invalid(parsePath(se.Field), field.OmitValueType{}, fmt.Sprintf("Secret %q key %q: %v", se.Ref.Name, se.Ref.Key, se.Err)))
	}
	if len(out) == 0 {
		out = append(out, field.Invalid(field.NewPath("spec"), field.OmitValueType{}, err.Error()))
	}
	return out
}

// renamed maps config-model fields onto the CacheTier fields that carry
// them where the names differ.
var renamed = map[string]string{
	"l2.password":                "l2.passwordSecretRef",
	"l2.caCert":                  "l2.tls.caSecretRef",
	"l2.tls":                     "l2.tls.enabled",
	"purge.token":                "purge.tokenSecretRef",
	"defaults.heuristicFraction": "defaults.heuristicPercent",
}

// specPath turns a config-model path ("rules[2].match.regex") into the
// CacheTier field path ("spec.rules[2].match.regex").
func specPath(p string) *field.Path {
	if r, ok := renamed[p]; ok {
		p = r
	}
	return parsePath("spec." + p)
}

// parsePath parses "a.b[2].c" into a field.Path.
func parsePath(p string) *field.Path {
	var out *field.Path
	for part := range strings.SplitSeq(p, ".") {
		name, rest, _ := strings.Cut(part, "[")
		if out == nil {
			out = field.NewPath(name)
		} else {
			out = out.Child(name)
		}
		for rest != "" {
			idx, after, _ := strings.Cut(rest, "]")
			var i int
			if _, err := fmt.Sscanf(idx, "%d", &i); err == nil {
				out = out.Index(i)
			} else {
				out = out.Key(idx)
			}
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return out
}

// quantity converts an optional quantity to a Size; a fractional or
// overflowing value is an error naming the field.
func quantity(fieldPath string, q *resource.Quantity) (tierconfig.Size, error) {
	if q == nil {
		return 0, nil
	}
	v, ok := q.AsInt64()
	if !ok {
		return 0, &tierconfig.FieldError{Field: fieldPath, Message: fmt.Sprintf("must be a whole number of bytes (got %s)", q.String())}
	}
	return tierconfig.Size(v), nil
}

// duration parses an optional Go duration string.
func duration(fieldPath string, d v1alpha1.Duration) (tierconfig.Duration, error) {
	if d == "" {
		return 0, nil
	}
	v, err := tierconfig.ParseDuration(string(d))
	if err != nil {
		return 0, &tierconfig.FieldError{Field: fieldPath, Message: fmt.Sprintf("must be a Go duration such as 30s or 5m (got %q)", string(d))}
	}
	return v, nil
}
