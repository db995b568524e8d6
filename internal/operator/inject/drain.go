package inject

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The drain hook. The kubelet sends a native sidecar SIGTERM only once the
// app has exited, so a sidecar that begins draining at its SIGTERM is too
// late for clients whose keep-alive connections kube-proxy pinned to the
// pod: they stay while the app lives, and their misses fail once it is
// gone. So the fronted app container gets a preStop hook: the kubelet runs
// it before it sends the app SIGTERM, and it GETs the sidecar's DrainPath
// on the admin port (at the pod IP) with the pod's drain token. The
// sidecar then fails /readyz, closes its clients' connections after each
// response, and holds the hook's answer for its drain delay, so the app
// keeps answering misses until clients have moved (internal/sidecar
// drain.go).
//
// Budget: the hook's hold is the drain delay, taken from the app's share
// of terminationGracePeriodSeconds; the sidecar's SIGTERM comes after the
// app exits with its drain already done, and --shutdown-timeout (the grace
// period less the drain delay) is what it has left. The sum is what it
// was when the sidecar drained after the app: the grace period.
const (
	// DrainPath is the sidecar's admin path of the preStop hook.
	DrainPath = "/drain"
	// DrainHoldHeader asks the sidecar to hold the hook at least this long
	// (a Go duration): set when the hook replaces the app's own preStop
	// sleep, which is longer than the drain delay.
	DrainHoldHeader = "X-Tiercache-Drain-Hold"
	// maxDrainHold is the longest hold the sidecar grants; a longer
	// preStop sleep is kept as it is.
	maxDrainHold = MaxDrainDelay
)

// drainHook gives the fronted app container c the preStop hook that drains
// the sidecar on the admin port, unless c has a preStop of its own that
// does more than sleep: that one is kept (a pod has one preStop per
// container), and the sidecar then drains only at its SIGTERM, after the
// app has exited. A preStop that only sleeps is replaced: the hook holds
// the app at least as long as the sleep did. It reports whether c got the
// hook.
func drainHook(c *corev1.Container, admin int32, token string, drain time.Duration) bool {
	var hold time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		ps := c.Lifecycle.PreStop
		if ps.Sleep == nil || ps.Exec != nil || ps.HTTPGet != nil || ps.TCPSocket != nil {
			return false
		}
		hold = time.Duration(ps.Sleep.Seconds) * time.Second
		if hold > maxDrainHold {
			return false
		}
	}
	get := &corev1.HTTPGetAction{
		Path:        DrainPath,
		Port:        intstr.FromInt32(admin),
		HTTPHeaders: []corev1.HTTPHeader{{Name: "Authorization", Value: "Bearer " + token}},
	}
	if hold > drain {
		get.HTTPHeaders = append(get.HTTPHeaders, corev1.HTTPHeader{Name: DrainHoldHeader, Value: hold.String()})
	}
	if c.Lifecycle == nil {
		c.Lifecycle = &corev1.Lifecycle{}
	}
	c.Lifecycle.PreStop = &corev1.LifecycleHandler{HTTPGet: get}
	return true
}

// checkDrainToken refuses a token that cannot be an HTTP header value.
func checkDrainToken(token string) error {
	if strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return fmt.Errorf("params: DrainToken must be printable ASCII without spaces")
	}
	return nil
}
