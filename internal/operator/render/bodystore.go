package render

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Limits of spec.bodyStore.size. Below 64Mi a body store holds too few
// large bodies to be worth a volume; above 1Ti an emptyDir is the wrong
// home, and a restarted sidecar reads every file once to check it.
const (
	minBodyVolume = 64 << 20
	maxBodyVolume = 1 << 40
	// memoryRoom is what a Memory body store must leave of a memory limit
	// set in spec.sidecar.resources for the process itself.
	memoryRoom = 64 << 20
)

// Volume is the pod-level half of spec.bodyStore: the emptyDir the
// injector adds and the budget the sidecar gets (--body-dir-size). The
// zero Volume (Size 0) means no body store.
type Volume struct {
	// Size is the budget in bytes.
	Size int64
	// Memory is true for a tmpfs (medium Memory), whose pages are charged
	// to the sidecar container's memory.
	Memory bool
}

// Medium is the emptyDir medium of v: "" (the node's disk) or Memory.
func (v Volume) Medium() corev1.StorageMedium {
	if v.Memory {
		return corev1.StorageMediumMemory
	}
	return corev1.StorageMediumDefault
}

// BodyVolume checks and returns the pod-level half of spec.bodyStore
// (size and medium); without spec.bodyStore.size there is no volume.
// Errors are FieldErrors named by their config-model path
// ("bodyStore.size"), so FieldErrors maps them onto the CacheTier field
// like every other error of the render.
func BodyVolume(spec v1alpha1.CacheTierSpec) (Volume, error) {
	bs := spec.BodyStore
	if bs == nil || bs.Size == nil {
		return Volume{}, nil
	}
	size, err := quantity("bodyStore.size", bs.Size)
	if err != nil {
		return Volume{}, err
	}
	bad := func(field, format string, args ...any) error {
		return &tierconfig.FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
	}
	var errs []error
	switch {
	case size < minBodyVolume:
		errs = append(errs, bad("bodyStore.size", "must be >= %s (got %s)", tierconfig.Size(minBodyVolume), size))
	case size > maxBodyVolume:
		errs = append(errs, bad("bodyStore.size", "must be <= %s (got %s)", tierconfig.Size(maxBodyVolume), size))
	}
	var medium v1alpha1.BodyStoreMedium = v1alpha1.BodyStoreDisk
	if bs.Medium != "" {
		medium = bs.Medium
	}
	switch medium {
	case v1alpha1.BodyStoreDisk, v1alpha1.BodyStoreMemory:
	default:
		errs = append(errs, bad("bodyStore.medium", "must be %s or %s (got %q)", v1alpha1.BodyStoreDisk, v1alpha1.BodyStoreMemory, bs.Medium))
	}
	if bs.MaxObjectSize != nil {
		if m, err := quantity("bodyStore.maxObjectSize", bs.MaxObjectSize); err == nil && m > size {
			errs = append(errs, bad("bodyStore.maxObjectSize", "must be <= bodyStore.size = %s: a larger body could never be stored (got %s)", size, m))
		}
	}
	v := Volume{Size: int64(size), Memory: medium == v1alpha1.BodyStoreMemory}
	if v.Memory {
		if r := spec.Sidecar.Resources; r != nil {
			if limit, ok := r.Limits[corev1.ResourceMemory]; ok && limit.Value()-memoryRoom < v.Size {
				errs = append(errs, bad("bodyStore.size", "with medium Memory the body files count against the sidecar's memory: must be <= spec.sidecar.resources.limits.memory - %s = %s (got %s); raise the limit, lower the size or use medium Disk",
					tierconfig.Size(memoryRoom), tierconfig.Size(max(limit.Value()-memoryRoom, 0)), size))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Volume{}, err
	}
	return v, nil
}
