// Package render turns a CacheTier into the sidecar's config model
// (tierconfig.Config): the one code path that the admission webhook, the
// controller and the pod injector share, so that a tier is judged and
// rendered the same way everywhere, and the same way the sidecar judges it
// (tierconfig.Validate).
//
// No secret value ever enters a rendered config: Secrets reach the sidecar
// as files of one projected volume (SecretFiles), and the config carries
// only their resourceVersions (SecretVersions), so that its hash, the xDS
// version and the pod annotation change when a Secret rotates. Secrets are
// looked up by metadata only, through a Secrets interface, and only
// Secrets labelled tiercache.io/allow-reference=true count.
package render

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// KeyPrefix is the Redis key prefix of a tier, as DESIGN.md fixes it:
// "tc:<namespace>/<tier>:", always derived (the CacheTier cannot set it).
func KeyPrefix(namespace, tier string) string {
	return tierconfig.KeyPrefix(namespace, tier)
}

// Redacted renders the tier without looking at Secrets and validates the
// result: the form the admission webhook validates (a Secret may be
// created after the tier). SecretVersions is empty.
func Redacted(tier *v1alpha1.CacheTier) (tierconfig.Config, error) {
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
	c = c.WithDefaults()
	_, volErr := BodyVolume(tier.Spec)
	if err := errors.Join(c.Validate(), volErr); err != nil {
		return tierconfig.Config{}, err
	}
	return c, nil
}

// Config renders the tier with defaults filled and its Secrets resolved
// through s to resourceVersions (SecretVersions), and validates it. No
// secret value is read: l2.password, l2.caCert and purge.token stay empty
// (the sidecar reads them from its secrets directory). A spec the sidecar
// would refuse returns an error for which FieldErrors gives the CacheTier
// fields; Secrets that do not resolve return *SecretErrors (SecretErrors).
func Config(ctx context.Context, tier *v1alpha1.CacheTier, s Secrets) (tierconfig.Config, error) {
	c, err := Redacted(tier)
	if err != nil {
		return tierconfig.Config{}, err
	}
	v, err := SecretVersions(ctx, tier, s)
	if err != nil {
		return tierconfig.Config{}, err
	}
	if len(v) > 0 {
		c.SecretVersions = v
	}
	return c, nil
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
	for _, se := range SecretErrors(err) {
		p := field.NewPath("metadata", "name")
		if !se.File.Generated() {
			p = parsePath(se.File.Field)
		}
		out = append(out, field.Invalid(p, field.OmitValueType{}, se.Error()))
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
		return 0, &tierconfig.FieldError{Field: fieldPath, Message: fmt.Sprintf("must be %s (got %q)", tierconfig.DurationSyntax, string(d))}
	}
	return v, nil
}
