package operator

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// admit POSTs a pod admission (a pod that asks for no sidecar: allowed
// without reading anything) to the webhook at base, and reports whether
// the request went out on a connection used before and whether the answer
// closes its connection.
func admit(c *http.Client, base string, uid int) (reused, closes bool, err error) {
	pod, _ := json.Marshal(&corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "p" + strconv.Itoa(uid)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
	})
	review, _ := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID(strconv.Itoa(uid)),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: "shop", Operation: admissionv1.Create,
			Object: runtime.RawExtension{Raw: pod},
		},
	})
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+PodMutatePath, bytes.NewReader(review))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return false, false, err
	}
	defer resp.Body.Close()
	var got admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		return reused, resp.Close, fmt.Errorf("%s: %w", resp.Status, err)
	}
	if got.Response == nil || !got.Response.Allowed || got.Response.UID != types.UID(strconv.Itoa(uid)) {
		return reused, resp.Close, fmt.Errorf("%s: response %+v", resp.Status, got.Response)
	}
	return reused, resp.Close, nil
}

// readyzStatus is the operator's /readyz status (0 when it does not answer).
func readyzStatus(addr string) int {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestOnSIGTERMTheOperatorFailsReadinessAndKeepsAdmittingForTheDelay: the
// API server keeps calling a leaving replica until endpoints update, and
// reuses its pooled connection to it; a replica that stopped at once
// failed those admissions (issue 27).
func TestOnSIGTERMTheOperatorFailsReadinessAndKeepsAdmittingForTheDelay(t *testing.T) {
	needCluster(t)
	wo := cluster.env.WebhookInstallOptions
	webhookAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	probeAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	const delay = 3 * time.Second
	opCtx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() {
		_, port, _ := net.SplitHostPort(webhookAddr)
		done <- RunWith(opCtx, []string{
			"--namespace=" + operatorNS,
			"--replica-name=leaving",
			"--cert-mode=external",
			"--webhook-host=127.0.0.1",
			"--webhook-port=" + port,
			"--webhook-cert-dir=" + wo.LocalServingCertDir,
			"--leader-elect=false",
			"--metrics-bind-address=0",
			"--health-probe-bind-address=" + probeAddr,
			"--xds-listen=",
			"--shutdown-delay=" + delay.String(),
		}, Env{Getenv: noEnv, Stderr: logSink(), RestConfig: cluster.cfg, SkipNameValidation: true, Registerer: prometheus.NewRegistry()})
	}()
	eventually(t, 60*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("the operator exited: %v", err)
		default:
		}
		if s := readyzStatus(probeAddr); s != http.StatusOK {
			return fmt.Errorf("/readyz %d", s)
		}
		return nil
	})

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(wo.LocalServingCAData)
	// The API server speaks HTTP/2 to webhooks; HTTP/1.1 clients exist
	// too (a proxy in between).
	clients := map[string]*http.Client{
		"HTTP/2":   {Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}},
		"HTTP/1.1": {Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}},
	}
	base := "https://" + webhookAddr
	uid := 0
	for proto, c := range clients {
		defer c.CloseIdleConnections()
		for i := range 2 {
			uid++
			reused, closes, err := admit(c, base, uid)
			if err != nil || closes || (i == 1 && !reused) {
				t.Fatalf("%s before SIGTERM: reused %v, closes %v, %v; want a pooled connection", proto, reused, closes, err)
			}
		}
	}

	began := time.Now()
	stop()
	// Readiness fails first, while the replica still answers.
	deadline := time.Now().Add(2 * time.Second)
	for s := readyzStatus(probeAddr); s < 500; s = readyzStatus(probeAddr) {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %d 2s after SIGTERM; want a 5xx from a replica still serving", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for proto, c := range clients {
		// The pooled connection still gets its answer, which closes it
		// (HTTP/1.1: Connection: close; HTTP/2: GOAWAY, which the client
		// may read only after it sent its next call, then retried on a
		// new connection); every call is admitted, and soon one opens a
		// new connection.
		moved := false
		for i := 0; i < 20 && !moved; i++ {
			uid++
			reused, closes, err := admit(c, base, uid)
			if err != nil {
				t.Fatalf("%s call %d after SIGTERM: %v; want admitted during the shutdown delay", proto, i, err)
			}
			if proto == "HTTP/1.1" && i == 0 && !closes {
				t.Errorf("%s: the first answer after SIGTERM lacks Connection: close", proto)
			}
			moved = !reused
		}
		if !moved {
			t.Errorf("%s: 20 calls after SIGTERM all reused the pooled connection", proto)
		}
	}
	if time.Since(began) < delay-500*time.Millisecond {
		select {
		case err := <-done:
			t.Fatalf("the operator returned %s after SIGTERM, before its %s shutdown delay: %v", time.Since(began), delay, err)
		default:
		}
	}
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("RunWith: %v", err)
		}
		if took := time.Since(began); took < delay {
			t.Errorf("the operator stopped %s after SIGTERM; want at least the shutdown delay %s", took, delay)
		}
	case <-time.After(delay + ManagerStopTimeout + 5*time.Second):
		t.Fatal("the operator did not stop within the shutdown delay and the manager's stop timeout")
	}
	if _, _, err := admit(clients["HTTP/1.1"], base, uid+1); err == nil {
		t.Error("the webhook still answers after the operator returned")
	}
}
