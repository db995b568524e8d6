package tierconfig

import "math"

// MemoryAllowance is what the sidecar's automatic Go soft memory limit
// (--memory-limit auto) allows above l1.maxSize: bigcache's index maps
// (about 90 bytes per entry), the runtime, per-request garbage, the
// bodies of fills in flight, and the request bodies and responses read
// ahead (at most 16Mi each, proxy.RequestBufferBudget and
// proxy.ResponseBufferBudget). Measured under a flood of
// distinct 1 KiB URLs into a 64Mi L1 (make bench, part 7): the live heap
// is L1 + about 10Mi and the process's RSS peaks about 12Mi above the Go
// limit (the binary's text is not Go memory), so L1 + 48Mi keeps RSS
// within the target of L1 + 64Mi.
const MemoryAllowance = 48 * Mi

// AutoMemoryLimit is the Go soft memory limit the sidecar sets for an L1
// of l1MaxSize when --memory-limit is auto: l1MaxSize + MemoryAllowance
// (saturating; a negative size counts as 0). It is the floor of the limit:
// the sidecar raises it while the live heap needs more (see
// internal/sidecar), and the operator's derived container memory stays
// well above it (internal/operator/inject.DerivedMemory).
func AutoMemoryLimit(l1MaxSize Size) Size {
	l1MaxSize = max(l1MaxSize, 0)
	if l1MaxSize > math.MaxInt64-MemoryAllowance {
		return math.MaxInt64
	}
	return l1MaxSize + MemoryAllowance
}
