package operator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/operator/render"
)

// secretReader resolves Secret references with an uncached reader, so the
// operator never holds every Secret of the cluster in memory; the
// controller watches Secrets by metadata only.
type secretReader struct{ r client.Reader }

func (s secretReader) SecretValue(ctx context.Context, ns string, ref corev1.SecretKeySelector) (string, error) {
	var sec corev1.Secret
	if err := s.r.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, &sec); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("no such Secret: %w", render.ErrNotFound)
		}
		return "", err
	}
	v, ok := sec.Data[ref.Key]
	if !ok {
		return "", fmt.Errorf("no such key in the Secret: %w", render.ErrNotFound)
	}
	return string(v), nil
}
