package inject

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Per-pod annotations that override the sidecar's resources, drain delay
// and log level, like Istio's sidecar.istio.io/proxyCPU and friends. They win over
// the CacheTier's spec.sidecar.resources (or the derived memory) and the
// operator's --sidecar-drain-delay, for that pod only.
const (
	AnnotationCPURequest    = "tiercache.io/sidecar-cpu-request"
	AnnotationCPULimit      = "tiercache.io/sidecar-cpu-limit"
	AnnotationMemoryRequest = "tiercache.io/sidecar-memory-request"
	AnnotationMemoryLimit   = "tiercache.io/sidecar-memory-limit"
	// AnnotationDrainDelay is the sidecar's --drain-delay: how long it
	// keeps serving after SIGTERM with /readyz failing.
	AnnotationDrainDelay = "tiercache.io/sidecar-drain-delay"
	// AnnotationLogLevel is the sidecar's --log-level (debug, info, warn
	// or error), as Istio's sidecar.istio.io/logLevel: turn one pod's
	// logs up to debug a miss without touching the others.
	AnnotationLogLevel = "tiercache.io/sidecar-log-level"
)

// logLevels are the sidecar's --log-level values.
var logLevels = []string{"debug", "info", "warn", "error"}

const (
	// DefaultDrainDelay is the drain delay of injected sidecars when
	// neither the operator (--sidecar-drain-delay) nor the pod
	// (AnnotationDrainDelay) sets one: Istio's terminationDrainDuration.
	DefaultDrainDelay = 5 * time.Second
	// MaxDrainDelay is the longest drain delay the sidecar accepts.
	MaxDrainDelay = 5 * time.Minute
	// defaultGracePeriod is the pod's terminationGracePeriodSeconds when
	// it sets none (the API server's default).
	defaultGracePeriod = 30 * time.Second
	// minGoMemory is the smallest Go memory limit the sidecar accepts
	// (--memory-limit).
	minGoMemory = 64 * mi
)

// resourceAnnotation is one resource override: its annotation, the
// resource and whether it is the request or the limit.
type resourceAnnotation struct {
	name     string
	resource corev1.ResourceName
	limit    bool
}

var resourceAnnotations = []resourceAnnotation{
	{AnnotationCPURequest, corev1.ResourceCPU, false},
	{AnnotationCPULimit, corev1.ResourceCPU, true},
	{AnnotationMemoryRequest, corev1.ResourceMemory, false},
	{AnnotationMemoryLimit, corev1.ResourceMemory, true},
}

// Overrides are the per-pod annotations of a pod, parsed.
type Overrides struct {
	// Requests and Limits hold only the annotated resources.
	Requests, Limits corev1.ResourceList
	// DrainDelay is nil unless AnnotationDrainDelay is set.
	DrainDelay *time.Duration
	// LogLevel is empty unless AnnotationLogLevel is set.
	LogLevel string
}

// PodOverrides parses and checks the per-pod annotations on their own (a
// quantity that does not parse or is not positive, a drain delay out of
// range); the admission webhook calls it before anything else, and Inject
// again, where it also checks them against the sidecar's other resources
// and the pod's grace period. Errors name the annotation.
func PodOverrides(pod *corev1.Pod) (Overrides, error) {
	var o Overrides
	if pod == nil {
		return o, nil
	}
	for _, a := range resourceAnnotations {
		raw, ok := pod.Annotations[a.name]
		if !ok {
			continue
		}
		q, err := resource.ParseQuantity(raw)
		if err != nil {
			return Overrides{}, fmt.Errorf("annotation %s: %q is not a quantity (e.g. %s)", a.name, raw, example(a.resource))
		}
		if q.Sign() <= 0 {
			return Overrides{}, fmt.Errorf("annotation %s: must be > 0 (got %s)", a.name, raw)
		}
		list := &o.Requests
		if a.limit {
			list = &o.Limits
		}
		if *list == nil {
			*list = corev1.ResourceList{}
		}
		(*list)[a.resource] = q
	}
	if raw, ok := pod.Annotations[AnnotationDrainDelay]; ok {
		d, err := time.ParseDuration(raw)
		switch {
		case err != nil:
			return Overrides{}, fmt.Errorf("annotation %s: %q is not a duration (e.g. 5s)", AnnotationDrainDelay, raw)
		case d < 0 || d > MaxDrainDelay:
			return Overrides{}, fmt.Errorf("annotation %s: must be between 0s and %s (got %s)", AnnotationDrainDelay, MaxDrainDelay, raw)
		}
		o.DrainDelay = &d
	}
	if raw, ok := pod.Annotations[AnnotationLogLevel]; ok {
		if !slices.Contains(logLevels, raw) {
			return Overrides{}, fmt.Errorf("annotation %s: %q is not one of %s", AnnotationLogLevel, raw, strings.Join(logLevels, ", "))
		}
		o.LogLevel = raw
	}
	return o, nil
}

func example(r corev1.ResourceName) string {
	if r == corev1.ResourceCPU {
		return "250m"
	}
	return "512Mi"
}

// applyResources overlays the annotated requests and limits on base (the
// tier's or the derived resources) and checks the result: a request above
// its limit is refused, naming the annotation that made it so. An
// annotated limit below a request that was not annotated lowers that
// request to it, as Kubernetes defaults a missing request to its limit.
func (o Overrides) applyResources(base corev1.ResourceRequirements) (corev1.ResourceRequirements, error) {
	res := *base.DeepCopy()
	for r, q := range o.Limits {
		if res.Limits == nil {
			res.Limits = corev1.ResourceList{}
		}
		res.Limits[r] = q
	}
	for r, q := range o.Requests {
		if res.Requests == nil {
			res.Requests = corev1.ResourceList{}
		}
		res.Requests[r] = q
	}
	for _, a := range resourceAnnotations {
		if a.limit {
			continue
		}
		req, hasReq := res.Requests[a.resource]
		limit, hasLimit := res.Limits[a.resource]
		if !hasReq || !hasLimit || req.Cmp(limit) <= 0 {
			continue
		}
		_, reqAnnotated := o.Requests[a.resource]
		if !reqAnnotated {
			res.Requests[a.resource] = limit.DeepCopy()
			continue
		}
		limitName := AnnotationCPULimit
		if a.resource == corev1.ResourceMemory {
			limitName = AnnotationMemoryLimit
		}
		if _, limitAnnotated := o.Limits[a.resource]; limitAnnotated {
			return corev1.ResourceRequirements{}, fmt.Errorf("annotation %s: %s is above %s: %s", a.name, req.String(), limitName, limit.String())
		}
		return corev1.ResourceRequirements{}, fmt.Errorf("annotation %s: %s is above the sidecar's %s limit %s; raise the limit with the annotation %s", a.name, req.String(), a.resource, limit.String(), limitName)
	}
	return res, nil
}

// gracePeriod is the pod's terminationGracePeriodSeconds as a duration.
func gracePeriod(spec *corev1.PodSpec) time.Duration {
	if s := spec.TerminationGracePeriodSeconds; s != nil {
		return time.Duration(max(*s, 0)) * time.Second
	}
	return defaultGracePeriod
}

// shutdown returns the sidecar's --drain-delay and --shutdown-timeout for
// a pod with grace period grace. The pod's terminationGracePeriodSeconds
// is never changed: it is the pod owner's budget for the app, and a
// native sidecar is stopped within it, after the app. So the sidecar fits
// itself into it: an annotated drain delay must be shorter than the grace
// period; the default one is cut to half of it; and in-flight requests
// get what the grace period leaves after the drain delay (at least 1s),
// which is all they can get if the app exits at once.
func shutdown(grace time.Duration, def time.Duration, annotated *time.Duration) (drain, timeout time.Duration, err error) {
	switch {
	case annotated != nil && *annotated > 0 && *annotated >= grace:
		return 0, 0, fmt.Errorf("annotation %s: %s does not fit in the pod's terminationGracePeriodSeconds (%s): the kubelet would kill the sidecar while it drains; lower the delay or raise the grace period", AnnotationDrainDelay, *annotated, grace)
	case annotated != nil:
		drain = *annotated
	default:
		drain = min(def, grace/2)
	}
	timeout = max(grace-drain, time.Second)
	return drain, timeout, nil
}
