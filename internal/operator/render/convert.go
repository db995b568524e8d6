package render

import (
	"errors"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// convert maps the spec onto the config model, without defaults and
// without Secrets. tools/convertgen writes the conversion of every field
// that maps one to one (zz_generated.convert.go, make generate); the
// fields it leaves to this file are listed below, each with its reason,
// and convertgen fails on a field of either side that is neither
// converted nor listed. Sizes and durations that do not convert are
// FieldErrors named by their config-model path (so FieldErrors maps them
// back like any validation error).
func convert(spec v1alpha1.CacheTierSpec) (tierconfig.Config, error) {
	var cv converter
	var c tierconfig.Config
	cv.cacheTierSpec("", &spec, &c)
	if spec.L2 != nil && spec.L2.TLS != nil {
		c.L2.TLS = spec.L2.TLS.Enabled
	}
	c.Defaults.HeuristicFraction = float64(spec.Defaults.HeuristicPercent) / 100
	// The shared type's deep copy keeps an empty list; a tier that writes
	// "allow: []" has always rendered without requestHeaders (omitzero),
	// and keeps that config and its hash.
	c.RequestHeaders.Allow = nilIfEmpty(c.RequestHeaders.Allow)
	c.RequestHeaders.AllowUnderscoredNames = nilIfEmpty(c.RequestHeaders.AllowUnderscoredNames)
	return c, errors.Join(cv.errs...)
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// Converted here, above:
//
//convertgen:byhand v1alpha1.L2Spec.TLS an object (enabled, caSecretRef); the config has the switch
//convertgen:byhand v1alpha1.DefaultsSpec.HeuristicPercent a percentage; the config has a fraction
//convertgen:byhand tierconfig.Defaults.HeuristicFraction from heuristicPercent
//
// Never in the config: Secrets reach the sidecar as files (SecretFiles,
// SecretVersions), and the pod's shape is the injector's:
//
//convertgen:byhand v1alpha1.L2Spec.PasswordSecretRef a Secret: a file of the pod, its version in SecretVersions
//convertgen:byhand tierconfig.L2.Password a secret value: the sidecar reads it from its file
//convertgen:byhand tierconfig.L2.CACert a secret value: the sidecar reads it from its file
//convertgen:byhand v1alpha1.PurgeSpec.TokenSecretRef a Secret: a file of the pod, its version in SecretVersions
//convertgen:byhand tierconfig.Purge.Token a secret value: the sidecar reads it from its file
//convertgen:byhand tierconfig.Config.SecretVersions filled by Config (SecretVersions)
//convertgen:byhand tierconfig.L2.KeyPrefix derived from the tier's name by Redacted, never chosen
//convertgen:byhand v1alpha1.BodyStoreSpec.Size the pod's volume (BodyVolume)
//convertgen:byhand v1alpha1.BodyStoreSpec.Medium the pod's volume (BodyVolume)
//convertgen:byhand v1alpha1.CacheTierSpec.Sidecar the injected container (inject)
//
// The types convertgen converts through a method of converter:
//
//convertgen:via v1alpha1.Duration tierconfig.Duration duration
//convertgen:via *resource.Quantity tierconfig.Size size

// converter collects the errors of one conversion.
type converter struct{ errs []error }

// duration converts a duration of the field at path.
func (cv *converter) duration(path string, d v1alpha1.Duration) tierconfig.Duration {
	v, err := duration(path, d)
	if err != nil {
		cv.errs = append(cv.errs, err)
	}
	return v
}

// size converts a quantity of the field at path.
func (cv *converter) size(path string, q *resource.Quantity) tierconfig.Size {
	v, err := quantity(path, q)
	if err != nil {
		cv.errs = append(cv.errs, err)
	}
	return v
}
