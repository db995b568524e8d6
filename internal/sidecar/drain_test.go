package sidecar

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/operator/inject"
)

const testDrainToken = "drain-token-for-tests"

// getTraced GETs url with c and reports whether the request went out on a
// connection that an earlier request had used.
func getTraced(t *testing.T, c *http.Client, url string) (resp *http.Response, body string, reused bool) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
	}))
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b), reused
}

// hookResult is what a call of the drain path got, and when it ended.
type hookResult struct {
	status int
	body   string
	err    error
	took   time.Duration
}

// callHook calls the drain path as the kubelet's preStop httpGet does,
// with header (nil: none), in the background.
func callHook(admin string, header http.Header) <-chan hookResult {
	out := make(chan hookResult, 1)
	go func() {
		began := time.Now()
		req, err := http.NewRequest(http.MethodGet, "http://"+admin+drainPath, nil)
		if err != nil {
			out <- hookResult{err: err}
			return
		}
		req.Header = header
		if req.Header == nil {
			req.Header = http.Header{}
		}
		c := &http.Client{Timeout: 30 * time.Second}
		resp, err := c.Do(req)
		if err != nil {
			out <- hookResult{err: err, took: time.Since(began)}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		out <- hookResult{status: resp.StatusCode, body: string(b), err: err, took: time.Since(began)}
	}()
	return out
}

func bearer(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

// waitReadyz polls /readyz until it answers want, for at most 3s.
func waitReadyz(t *testing.T, admin string, want int) {
	t.Helper()
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(3 * time.Second)
	for {
		resp, err := c.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz did not answer %d within 3s (last: %v %v)", want, resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// idleConn opens a connection to addr, makes one keep-alive request on it
// and leaves it idle.
func idleConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET /idle HTTP/1.1\r\nHost: app\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		t.Fatal("the first response on a new connection already closes it")
	}
	return c
}

// closedByPeer reports whether c is closed by the other end within 3s.
func closedByPeer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF)
}

// The kubelet runs the app's preStop hook while the app still runs: from
// then on a client that kube-proxy pinned to this pod with a keep-alive
// connection must move, or its misses fail once the app has exited.
func TestTheDrainHookMovesKeepAliveClientsWhileTheAppStillAnswers(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "app "+r.URL.Path)
	}))
	defer origin.Close()
	const delay = 1500 * time.Millisecond
	s := start(t, origin.URL, "--drain-delay", delay.String(), "--drain-token", testDrainToken)
	base := "http://" + s.addrs.Serve

	if _, _, reused := getTraced(t, s.client, base+"/a"); reused {
		t.Fatal("the first request reused a connection")
	}
	if resp, _, reused := getTraced(t, s.client, base+"/a"); !reused || resp.Close {
		t.Fatalf("before the drain: reused %v, Connection: close %v; want a kept-alive connection", reused, resp.Close)
	}
	idle := idleConn(t, s.addrs.Serve)

	hook := callHook(s.addrs.Admin, bearer(testDrainToken))
	waitReadyz(t, s.addrs.Admin, http.StatusServiceUnavailable)

	if !closedByPeer(idle) {
		t.Error("an idle keep-alive connection was not closed when the drain began")
	}
	// A miss still reaches the app, and the answer closes the connection.
	resp, body, _ := getTraced(t, s.client, base+"/miss-while-draining")
	if resp.StatusCode != http.StatusOK || body != "app /miss-while-draining" {
		t.Fatalf("a miss during the hold: %d %q; want the app's answer", resp.StatusCode, body)
	}
	if !resp.Close {
		t.Errorf("a response during the drain lacks Connection: close (header %q)", resp.Header.Get("Connection"))
	}
	if resp, _, reused := getTraced(t, s.client, base+"/a"); reused || !resp.Close {
		t.Errorf("the request after a Connection: close answer: reused %v, Connection: close %v; want a new connection, closed again", reused, resp.Close)
	}

	select {
	case r := <-hook:
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("the hook: %d %q %v", r.status, r.body, r.err)
		}
		if r.took < delay-100*time.Millisecond || r.took > delay+3*time.Second {
			t.Errorf("the hook was held %s; want about the drain delay %s", r.took, delay)
		}
	case <-time.After(delay + 5*time.Second):
		t.Fatal("the hook was not answered within the drain delay + 5s")
	}

	// The kubelet now sends the app SIGTERM, and the sidecar its own once
	// the app has exited: the drain delay is spent, so it stops at once.
	began := time.Now()
	s.stop(t)
	if took := time.Since(began); took >= delay {
		t.Errorf("after the hook held the drain delay, SIGTERM took %s to stop the sidecar; want no second drain delay", took)
	}
}

// Without the hook (an app with a preStop of its own, or a sidecar run by
// hand), SIGTERM does the same for the drain delay.
func TestSIGTERMClosesKeepAliveConnectionsDuringTheDrainDelay(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "app")
	}))
	defer origin.Close()
	s := start(t, origin.URL, "--drain-delay", "2s")
	base := "http://" + s.addrs.Serve
	getTraced(t, s.client, base+"/hit")
	if resp, _, reused := getTraced(t, s.client, base+"/hit"); !reused || resp.Close {
		t.Fatalf("before SIGTERM: reused %v, Connection: close %v", reused, resp.Close)
	}
	idle := idleConn(t, s.addrs.Serve)

	s.cancel()
	waitReadyz(t, s.addrs.Admin, http.StatusServiceUnavailable)
	if !closedByPeer(idle) {
		t.Error("an idle keep-alive connection was not closed at SIGTERM")
	}
	resp, body, _ := getTraced(t, s.client, base+"/hit")
	if resp.StatusCode != http.StatusOK || body != "app" || !resp.Close {
		t.Errorf("a hit during the drain delay: %d %q, Connection: close %v; want served with Connection: close", resp.StatusCode, body, resp.Close)
	}
	if _, _, reused := getTraced(t, s.client, base+"/hit"); reused {
		t.Error("the request after a Connection: close answer reused the connection")
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the drain delay")
	}
}

// The drain path takes a pod out of its Services: only the holder of the
// pod's token may call it.
func TestTheDrainPathRefusesCallersWithoutTheToken(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer origin.Close()
	cases := map[string]struct {
		args   []string
		method string
		header http.Header
		status int
		says   string
	}{
		"no Authorization header": {
			args: []string{"--drain-token", testDrainToken}, header: nil,
			status: http.StatusForbidden, says: "drain token is required",
		},
		"a wrong token": {
			args: []string{"--drain-token", testDrainToken}, header: bearer("guess"),
			status: http.StatusForbidden, says: "drain token is required",
		},
		"the token as a prefix": {
			args: []string{"--drain-token", testDrainToken}, header: bearer(testDrainToken[:5]),
			status: http.StatusForbidden, says: "drain token is required",
		},
		"the token without Bearer": {
			args: []string{"--drain-token", testDrainToken}, header: http.Header{"Authorization": {testDrainToken}},
			status: http.StatusForbidden, says: "drain token is required",
		},
		"a sidecar without a token refuses even an empty bearer": {
			args: nil, header: bearer(""),
			status: http.StatusForbidden, says: "has no drain token",
		},
		"a method other than GET or POST": {
			args: []string{"--drain-token", testDrainToken}, method: http.MethodPut, header: bearer(testDrainToken),
			status: http.StatusMethodNotAllowed, says: "use GET",
		},
		"a hold that is not a duration": {
			args:   []string{"--drain-token", testDrainToken},
			header: http.Header{"Authorization": {"Bearer " + testDrainToken}, drainHoldHeader: {"ten"}},
			status: http.StatusBadRequest, says: drainHoldHeader,
		},
		"a hold above 5m": {
			args:   []string{"--drain-token", testDrainToken},
			header: http.Header{"Authorization": {"Bearer " + testDrainToken}, drainHoldHeader: {"6m"}},
			status: http.StatusBadRequest, says: "between 0s and 5m",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := start(t, origin.URL, append([]string{"--drain-delay", "1s"}, tc.args...)...)
			defer s.stop(t)
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			req, _ := http.NewRequest(method, "http://"+s.addrs.Admin+drainPath, nil)
			if tc.header != nil {
				req.Header = tc.header
			}
			resp, err := s.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.says) {
				t.Errorf("got %d %q; want %d saying %q", resp.StatusCode, b, tc.status, tc.says)
			}
			// Nothing changed: ready, and connections kept alive.
			if resp, _ := s.get(t, "http://"+s.addrs.Admin+"/readyz"); resp.StatusCode != http.StatusOK {
				t.Errorf("/readyz %d after a refused drain", resp.StatusCode)
			}
			getTraced(t, s.client, "http://"+s.addrs.Serve+"/x")
			if resp, _, reused := getTraced(t, s.client, "http://"+s.addrs.Serve+"/x"); !reused || resp.Close {
				t.Errorf("after a refused drain: reused %v, Connection: close %v; want keep-alive", reused, resp.Close)
			}
		})
	}
}

// The hold is the drain delay, or what the hook asks for when that is
// longer (the app's own preStop sleep that the hook replaced); a second
// hook ends with the first; the sidecar's stop ends a hold at once.
func TestTheHookIsHeldForTheDrainDelayOrTheHoldItAsks(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer origin.Close()
	const delay = time.Second
	s := start(t, origin.URL, "--drain-delay", delay.String(), "--drain-token", testDrainToken)

	first := callHook(s.addrs.Admin, bearer(testDrainToken))
	waitReadyz(t, s.addrs.Admin, http.StatusServiceUnavailable)
	second := callHook(s.addrs.Admin, bearer(testDrainToken))
	longer := callHook(s.addrs.Admin, http.Header{"Authorization": {"Bearer " + testDrainToken}, drainHoldHeader: {"2500ms"}})
	var took [3]time.Duration
	for i, c := range []<-chan hookResult{first, second, longer} {
		select {
		case r := <-c:
			if r.err != nil || r.status != http.StatusOK {
				t.Fatalf("hook %d: %d %q %v", i, r.status, r.body, r.err)
			}
			took[i] = r.took
		case <-time.After(10 * time.Second):
			t.Fatalf("hook %d not answered within 10s", i)
		}
	}
	if took[0] < delay-50*time.Millisecond || took[0] > delay+2*time.Second {
		t.Errorf("the first hook was held %s; want the drain delay %s", took[0], delay)
	}
	if took[1] > took[0] {
		t.Errorf("a second hook was held %s, longer than the first (%s): the drain delay counts from the drain's start", took[1], took[0])
	}
	if took[2] < 2500*time.Millisecond-50*time.Millisecond || took[2] > 2500*time.Millisecond+2*time.Second {
		t.Errorf("a hook asking for 2.5s was held %s", took[2])
	}

	// A hook under way when the sidecar stops is answered at once.
	held := callHook(s.addrs.Admin, http.Header{"Authorization": {"Bearer " + testDrainToken}, drainHoldHeader: {"5m"}})
	waitReadyz(t, s.addrs.Admin, http.StatusServiceUnavailable)
	began := time.Now()
	s.stop(t)
	select {
	case r := <-held:
		if r.err == nil && r.status != http.StatusOK {
			t.Errorf("a hook held at stop: %d %q", r.status, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a hook held for 5m kept the sidecar from stopping")
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("stopping with a hook held took %s", took)
	}
}

// The kubelet runs preStop hooks before it restarts a container whose
// liveness probe failed too; the pod stays, so the sidecar must not stay
// drained for ever.
func TestADrainThatNoSIGTERMFollowsIsUndone(t *testing.T) {
	serve := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer serve.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := newDrainer(100*time.Millisecond, time.Second, testDrainToken, serve.Config, slog.New(slog.DiscardHandler))
	d.undoAfter = 300 * time.Millisecond
	defer d.stop()
	hook := httptest.NewServer(d.hook(ctx))
	defer hook.Close()
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()

	req, _ := http.NewRequest(http.MethodGet, hook.URL, nil)
	req.Header = bearer(testDrainToken)
	resp, err := hook.Client().Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("hook: %v %v", resp, err)
	}
	resp.Body.Close()
	if !d.draining() {
		t.Fatal("not draining right after the hook")
	}
	if resp, _, _ := getTraced(t, c, serve.URL); !resp.Close {
		t.Fatal("no Connection: close while drained")
	}
	deadline := time.Now().Add(5 * time.Second)
	for d.draining() {
		if time.Now().After(deadline) {
			t.Fatal("still draining 5s after the hold, with an undo after 300ms")
		}
		time.Sleep(10 * time.Millisecond)
	}
	getTraced(t, c, serve.URL)
	if resp, _, reused := getTraced(t, c, serve.URL); !reused || resp.Close {
		t.Errorf("after the undo: reused %v, Connection: close %v; want keep-alive again", reused, resp.Close)
	}

	// After SIGTERM nothing is undone: a hook then arms no undo.
	d.terminate(time.Now())
	req, _ = http.NewRequest(http.MethodGet, hook.URL, nil)
	req.Header = bearer(testDrainToken)
	if resp, err = hook.Client().Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("hook after SIGTERM: %v %v", resp, err)
	}
	resp.Body.Close()
	d.mu.Lock()
	armed := d.undo != nil
	d.mu.Unlock()
	if armed || !d.draining() {
		t.Errorf("after SIGTERM and a hook: undo armed %v, draining %v; want never undone", armed, d.draining())
	}
}

// The hook the injector writes into the app container reaches the drain
// path of the sidecar it injects, with the token it gives it: the names
// on both sides are one contract.
func TestTheInjectedPreStopHookDrainsTheInjectedSidecar(t *testing.T) {
	if inject.DrainHoldHeader != drainHoldHeader || inject.EnvDrainToken != envName("drain-token") {
		t.Fatalf("the injector's names (%s, %s) are not the sidecar's (%s, %s)",
			inject.DrainHoldHeader, inject.EnvDrainToken, drainHoldHeader, envName("drain-token"))
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", Annotations: map[string]string{inject.AnnotationTier: "pages"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "app:1", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		}}},
	}
	if err := inject.Inject(pod, inject.Params{Tier: "pages", Image: "sidecar:1", DrainToken: "token-from-the-injector"}); err != nil {
		t.Fatal(err)
	}
	ls := pod.Spec.Containers[0].Lifecycle
	if ls == nil || ls.PreStop == nil || ls.PreStop.HTTPGet == nil {
		t.Fatalf("the app container has no preStop httpGet: %+v", ls)
	}
	get := ls.PreStop.HTTPGet
	var sc *corev1.Container
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == inject.ContainerName {
			sc = &pod.Spec.InitContainers[i]
		}
	}
	env := map[string]string{}
	for _, e := range sc.Env {
		env[e.Name] = e.Value
	}
	if get.Port.IntValue() != int(inject.DefaultAdminPort) || !strings.Contains(strings.Join(sc.Args, " "), "--admin-listen=:15190") {
		t.Fatalf("the hook's port %s is not the sidecar's admin port (args %q)", get.Port.String(), sc.Args)
	}

	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer origin.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- RunWith(ctx, []string{"--upstream", origin.URL, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
			"--log-level", "warn", "--memory-limit", "0", "--drain-delay", "100ms"}, func(k string) string { return env[k] }, io.Discard, func(a Addrs) { ready <- a })
	}()
	var addrs Addrs
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatalf("sidecar exited: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("sidecar did not start")
	}
	h := http.Header{}
	for _, hh := range get.HTTPHeaders {
		h.Add(hh.Name, hh.Value)
	}
	// The kubelet GETs scheme://<pod IP>:<port><path>.
	req, _ := http.NewRequest(http.MethodGet, "http://"+addrs.Admin+get.Path, nil)
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the injected hook got %d %q", resp.StatusCode, b)
	}
	waitReadyz(t, addrs.Admin, http.StatusServiceUnavailable)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sidecar did not stop")
	}
}
