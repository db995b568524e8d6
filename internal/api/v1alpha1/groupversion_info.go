// Package v1alpha1 holds the CacheTier API (tiercache.io/v1alpha1): the Go
// types from which controller-gen generates the CRD in config/crd and the
// chart, and their deep-copy functions.
//
// Field names follow the sidecar's config model (internal/tierconfig) so
// that a validation error on the rendered config ("l2.timeout") names the
// CacheTier field ("spec.l2.timeout"). Where Kubernetes has its own idiom
// the type departs from the model: sizes are resource quantities, secrets
// are SecretKeySelectors (the controller reads them; the admission webhook
// never needs them), the heuristic fraction is a whole percentage (CRDs
// avoid floats), and spec.sidecar shapes the injected container.
//
// Where nothing departs, the type is the model's own, by type alias
// (Match, CacheKey, RequestHeadersSpec, AccessLogSpec, ...): its fields,
// validation markers and docs are written once, in tierconfig. The
// sections that depart are converted to the model by code that
// tools/convertgen generates (internal/operator/render).
//
// +kubebuilder:object:generate=true
// +groupName=tiercache.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of CacheTier.
var GroupVersion = schema.GroupVersion{Group: "tiercache.io", Version: "v1alpha1"}

// AddToScheme adds the types of this group-version to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &CacheTier{}, &CacheTierList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
