package kubectlplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// PodAccess reaches the admin port of a tier's pod.
type PodAccess interface {
	// Metrics returns the pod's /metrics in the Prometheus text format.
	Metrics(ctx context.Context, pod *corev1.Pod, port int32) ([]byte, error)
	// Forward returns a local address that reaches the pod's port until
	// stop is called. stop may be called more than once.
	Forward(ctx context.Context, pod *corev1.Pod, port int32) (addr string, stop func(), err error)
}

// textFormat asks promhttp for the text exposition format, whatever it
// would otherwise negotiate.
const textFormat = "text/plain;version=0.0.4"

// apiServerPods reaches pods through the API server: the pod proxy for
// metrics (GET needs no credentials of the sidecar's) and a port-forward
// for purges (the pod proxy drops the Authorization header the API server
// authenticated, so the sidecar would never see the purge token).
type apiServerPods struct {
	cfg *rest.Config
	cs  kubernetes.Interface
}

func newAPIServerPods(cfg *rest.Config) (*apiServerPods, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &apiServerPods{cfg: cfg, cs: cs}, nil
}

func (a *apiServerPods) Metrics(ctx context.Context, pod *corev1.Pod, port int32) ([]byte, error) {
	b, err := a.cs.CoreV1().RESTClient().Get().
		Namespace(pod.Namespace).Resource("pods").Name(pod.Name+":"+strconv.Itoa(int(port))).
		SubResource("proxy").Suffix("metrics").
		SetHeader("Accept", textFormat).
		Do(ctx).Raw()
	if err != nil {
		return nil, proxyError(err, b)
	}
	return b, nil
}

// proxyError says why the pod proxy failed: the message of the Status the
// API server answered ("error trying to reach service: dial tcp ...:
// connection refused"), or the text the pod answered, rather than the
// generic message client-go makes of the status code.
func proxyError(err error, body []byte) error {
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Message != "" {
		return fmt.Errorf("pod proxy: %s", st.Message)
	}
	if text := strings.TrimSpace(string(body)); text != "" {
		return fmt.Errorf("pod proxy: %w: %.200q", err, text)
	}
	return err
}

func (a *apiServerPods) Forward(ctx context.Context, pod *corev1.Pod, port int32) (string, func(), error) {
	u := a.cs.CoreV1().RESTClient().Post().
		Namespace(pod.Namespace).Resource("pods").Name(pod.Name).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(a.cfg)
	if err != nil {
		return "", nil, err
	}
	var dialer httpstream.Dialer = spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	// As kubectl port-forward does: WebSockets first, SPDY where the API
	// server or a proxy in between does not upgrade to them.
	ws, err := portforward.NewSPDYOverWebsocketDialer(u, a.cfg)
	if err != nil {
		return "", nil, err
	}
	dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	stopCh, readyCh := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(int(port))}, stopCh, readyCh, io.Discard, io.Discard)
	if err != nil {
		return "", nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	closeStop := sync.OnceFunc(func() { close(stopCh) })
	stop := sync.OnceFunc(func() {
		closeStop()
		<-done
	})
	select {
	case <-readyCh:
	case err := <-done:
		return "", nil, fmt.Errorf("port-forward to pod %s/%s port %d: %w", pod.Namespace, pod.Name, port, err)
	case <-ctx.Done():
		// The dial does not take a context: the forwarder returns as
		// soon as it ends, seeing stopCh closed.
		closeStop()
		return "", nil, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		stop()
		return "", nil, fmt.Errorf("port-forward to pod %s/%s port %d: no local port (%v)", pod.Namespace, pod.Name, port, err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), stop, nil
}
