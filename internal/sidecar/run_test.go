package sidecar

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tiercache/tiercache/internal/version"
)

func TestFlagsComeFromTheEnvironmentUnlessGivenOnTheCommandLine(t *testing.T) {
	env := map[string]string{
		"TIERCACHE_UPSTREAM":         "http://127.0.0.1:1",
		"TIERCACHE_LISTEN":           "127.0.0.1:7000",
		"TIERCACHE_SHUTDOWN_TIMEOUT": "3s",
	}
	o, err := ParseArgs([]string{"--listen", "127.0.0.1:7001"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Upstream != "http://127.0.0.1:1" || o.Listen != "127.0.0.1:7001" || o.ShutdownTimeout != 3*time.Second {
		t.Fatalf("parsed %+v", o)
	}
}

func TestBadArgumentsAreErrorsThatNameTheirSource(t *testing.T) {
	cases := map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"a missing upstream":          {nil, nil, "--upstream is required"},
		"a malformed env duration":    {[]string{"--upstream", "http://x:1"}, map[string]string{"TIERCACHE_SHUTDOWN_TIMEOUT": "soon"}, "TIERCACHE_SHUTDOWN_TIMEOUT"},
		"a stray positional argument": {[]string{"--upstream", "http://x:1", "extra"}, nil, "unexpected arguments"},
		"a tiny header limit":         {[]string{"--upstream", "http://x:1", "--max-header-bytes", "10"}, nil, "--max-header-bytes"},
		"a send timeout under 1s":     {[]string{"--upstream", "http://x:1", "--send-timeout", "500ms"}, nil, "--send-timeout: must be >= 1s"},
		"no send timeout":             {[]string{"--upstream", "http://x:1"}, map[string]string{"TIERCACHE_SEND_TIMEOUT": "0s"}, "--send-timeout: must be >= 1s"},
		"a negative connection bound": {[]string{"--upstream", "http://x:1", "--max-connections", "-1"}, nil, "--max-connections: must be >= 0"},
	}
	for name, c := range cases {
		_, err := ParseArgs(c.args, func(k string) string { return c.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, c.want)
		}
	}
}

func TestRunRefusesAnInvalidConfigNamingTheField(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tier.yaml")
	if err := os.WriteFile(path, []byte("l1:\n  maxSize: 8Mi\n  maxEntrySize: 4Mi\n  shards: 16\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := RunWith(context.Background(), []string{"--upstream", "http://127.0.0.1:1", "--config", path,
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, noEnv, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "l1.maxEntrySize") {
		t.Fatalf("err = %v, want it to name l1.maxEntrySize", err)
	}
	if err := RunWith(context.Background(), []string{"--upstream", "ftp://x"}, noEnv, io.Discard, nil); err == nil ||
		!strings.Contains(err.Error(), "--upstream") {
		t.Fatalf("err = %v, want it to name --upstream", err)
	}
}

func noEnv(string) string { return "" }

// buildInfoLine is the sample of tiercache_build_info for i on a metrics
// page.
func buildInfoLine(i version.Info) string {
	return fmt.Sprintf(`tiercache_build_info{goversion=%q,revision=%q,version=%q} 1`, i.GoVersion, i.Revision, i.Version)
}

func TestVersionPrintsTheBuildAndNeedsNoOtherFlag(t *testing.T) {
	var out, errOut strings.Builder
	if err := Run(context.Background(), []string{"--version"}, &out, &errOut); err != nil {
		t.Fatalf("Run --version: %v", err)
	}
	if want := "tiercache-sidecar " + version.Get().String() + "\n"; out.String() != want {
		t.Errorf("Run --version printed %q, want %q", out.String(), want)
	}
	if errOut.Len() != 0 {
		t.Errorf("Run --version wrote to stderr: %q", errOut.String())
	}
}

func TestTheVersionFlagIsNotReadFromTheEnvironment(t *testing.T) {
	env := map[string]string{"TIERCACHE_UPSTREAM": "http://127.0.0.1:1", "TIERCACHE_VERSION": "1.2.3"}
	o, err := ParseArgs(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("TIERCACHE_VERSION=1.2.3 in the environment: %v", err)
	}
	if o.ShowVersion {
		t.Error("TIERCACHE_VERSION in the environment asked for the version")
	}
}

// sidecar is a running sidecar in this process.
type sidecar struct {
	addrs  Addrs
	cancel context.CancelFunc
	done   chan error
	client *http.Client
}

func start(t *testing.T, upstream string, extra ...string) *sidecar {
	t.Helper()
	return startLogging(t, io.Discard, upstream, extra...)
}

// startLogging is start with the sidecar's log going to stderr.
func startLogging(t *testing.T, stderr io.Writer, upstream string, extra ...string) *sidecar {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan Addrs, 1)
	s := &sidecar{cancel: cancel, done: make(chan error, 1), client: &http.Client{Transport: &http.Transport{}}}
	args := append([]string{"--upstream", upstream, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--log-level", "warn", "--shutdown-timeout", "5s", "--memory-limit", "0"}, extra...)
	go func() { s.done <- RunWith(ctx, args, noEnv, stderr, func(a Addrs) { ready <- a }) }()
	select {
	case s.addrs = <-ready:
	case err := <-s.done:
		t.Fatalf("sidecar exited: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("sidecar did not start")
	}
	return s
}

func (s *sidecar) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sidecar did not stop")
	}
	s.client.CloseIdleConnections()
}

func (s *sidecar) get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := s.client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestServesCachesReportsAndShutsDownWithoutLeaks(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "from origin")
	}))
	defer origin.Close()
	s := start(t, origin.URL)
	base := "http://" + s.addrs.Serve
	admin := "http://" + s.addrs.Admin

	if resp, body := s.get(t, base+"/x"); resp.Header.Get("X-Cache") != "MISS" || body != "from origin" {
		t.Fatalf("first: %q %q", resp.Header.Get("X-Cache"), body)
	}
	if resp, _ := s.get(t, base+"/x"); resp.Header.Get("X-Cache") != "HIT; layer=l1" {
		t.Fatalf("second: %q", resp.Header.Get("X-Cache"))
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if resp, _ := s.get(t, admin+p); resp.StatusCode != 200 {
			t.Fatalf("%s: %d", p, resp.StatusCode)
		}
	}
	_, metrics := s.get(t, admin+"/metrics")
	for _, want := range []string{
		`tiercache_requests_total{layer="l1",result="hit",rule="default"} 1`,
		`tiercache_requests_total{layer="origin",result="miss",rule="default"} 1`,
		`tiercache_origin_requests_total{code="200"} 1`,
		`tiercache_l1_entries 1`,
		`tiercache_config_info{version="`,
		buildInfoLine(version.Get()),
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// The serving port never exposes admin endpoints.
	if resp, _ := s.get(t, base+"/purge"); resp.Header.Get("X-Cache") == "" {
		t.Fatal("/purge on the serving port was not proxied")
	}
	s.stop(t)
}

func TestShutdownDrainsInFlightRequests(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release // until the shutdown is under way
		_, _ = io.WriteString(w, "finished")
	}))
	defer origin.Close()
	var releaseOnce sync.Once
	releaseOrigin := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseOrigin()
	s := start(t, origin.URL)
	got := make(chan string, 1)
	go func() {
		resp, err := s.client.Get("http://" + s.addrs.Serve + "/slow")
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- string(b)
	}()
	<-started
	s.cancel()
	// The shutdown is under way once the serving port refuses new
	// connections; only then may the request in flight finish.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addrs.Serve, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the serving port still accepts connections 10s after the shutdown began")
		}
		time.Sleep(5 * time.Millisecond)
	}
	releaseOrigin()
	if body := <-got; body != "finished" {
		t.Fatalf("in-flight request got %q", body)
	}
	if err := <-s.done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := net.DialTimeout("tcp", s.addrs.Serve, time.Second); err == nil {
		t.Fatal("still accepting connections after shutdown")
	}
}

func TestOversizedRequestHeadersGet431(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer origin.Close()
	s := start(t, origin.URL, "--max-header-bytes", "8192")
	defer s.stop(t)
	req, _ := http.NewRequest("GET", "http://"+s.addrs.Serve+"/", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", resp.StatusCode)
	}
}

func TestARequestWithContentLengthAndTransferEncodingIsRefused(t *testing.T) {
	var reached atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	defer origin.Close()
	s := start(t, origin.URL)
	defer s.stop(t)
	conn, err := net.Dial("tcp", s.addrs.Serve)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(conn, "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n")
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 400") {
		t.Fatalf("status line %q, %v", status, err)
	}
	// The sidecar closes the connection after the 400. A connection's
	// requests are served one after the other, so once it is closed
	// anything it served has reached the origin: the count is final.
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("the connection was not closed after the 400: %v", err)
	}
	if strings.Contains(string(rest), "HTTP/1.1 ") {
		t.Fatalf("a second response followed the 400: %q", rest)
	}
	if reached.Load() != 0 {
		t.Fatalf("the origin saw %d requests", reached.Load())
	}
}

func TestPurgeAPIChecksWhoAndWhat(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Surrogate-Key", "k1 k2")
	}))
	defer origin.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	_ = os.WriteFile(cfg, []byte("purge: {token: 0123456789abcdef-token}\n"), 0o600)
	s := start(t, origin.URL, "--config", cfg)
	defer s.stop(t)
	base, admin := "http://"+s.addrs.Serve, "http://"+s.addrs.Admin
	s.get(t, base+"/a")
	s.get(t, base+"/b")

	post := func(body, token string) (int, string) {
		req, _ := http.NewRequest("POST", admin+"/purge", strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	cases := []struct {
		name, body, token string
		status            int
		want              string
	}{
		{"a missing token is refused", `{"tags":["k1"]}`, "", 401, "bearer token"},
		{"a wrong token is refused", `{"tags":["k1"]}`, "nope", 401, "bearer token"},
		{"malformed JSON is refused", `{"tags":`, "0123456789abcdef-token", 400, "invalid JSON"},
		{"unknown fields are refused", `{"url":["/a"]}`, "0123456789abcdef-token", 400, "unknown field"},
		{"an empty purge is refused", `{}`, "0123456789abcdef-token", 400, "nothing to purge"},
		{"a relative URL is refused", `{"urls":["a/b"]}`, "0123456789abcdef-token", 400, "urls[0]"},
		{"a prefix must be a path", `{"prefix":"api"}`, "0123456789abcdef-token", 400, "prefix"},
		{"soft must be true or false", `{"tags":["k2"],"soft":"yes"}`, "0123456789abcdef-token", 400, "soft: must be true or false"},
		{"a tag purge counts what went", `{"tags":["k2"]}`, "0123456789abcdef-token", 200, `{"purged":2,"l1":2,"bodies":0,"soft":false}`},
	}
	for _, c := range cases {
		status, body := post(c.body, c.token)
		if status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %q, want %d containing %q", c.name, status, body, c.status, c.want)
		}
	}
	if resp, _ := s.get(t, base+"/a"); resp.Header.Get("X-Cache") != "MISS" {
		t.Fatalf("after purge: %q", resp.Header.Get("X-Cache"))
	}
}

func TestMemoryLimitFollowsL1UnlessTheOperatorSetsOne(t *testing.T) {
	cases := map[string]struct {
		flag, env string
		want      int64
		err       string
	}{
		"auto adds 48Mi to L1":            {"auto", "", 256<<20 + 48<<20, ""},
		"auto defers to GOMEMLIMIT":       {"auto", "1GiB", 0, ""},
		"zero turns it off":               {"0", "", 0, ""},
		"an explicit size wins":           {"768Mi", "1GiB", 768 << 20, ""},
		"a tiny limit is refused":         {"1Mi", "", 0, "below the 64Mi minimum"},
		"a malformed size names the flag": {"lots", "", 0, "--memory-limit"},
	}
	for name, c := range cases {
		got, err := memoryLimit(c.flag, c.env, 256<<20)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err = %v, want %q", name, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: got %d, %v; want %d", name, got, err, c.want)
		}
	}
}

// TestDuringTheDrainDelayItServesButReportsNotReady: on shutdown (SIGTERM
// in a pod) readiness fails first; a request already in flight and new
// requests during the drain delay are served; then Run returns.
func TestDuringTheDrainDelayItServesButReportsNotReady(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		}
		_, _ = io.WriteString(w, "still here")
	}))
	defer origin.Close()
	var releaseOnce sync.Once
	releaseOrigin := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseOrigin() // before origin.Close, also when the test fails
	s := start(t, origin.URL, "--drain-delay", "2s")

	inflight := make(chan error, 1)
	go func() {
		resp, err := s.client.Get("http://" + s.addrs.Serve + "/slow")
		if err != nil {
			inflight <- err
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || string(body) != "still here" {
			inflight <- fmt.Errorf("%d %q %v", resp.StatusCode, body, err)
			return
		}
		inflight <- nil
	}()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the in-flight request did not reach the origin")
	}
	s.cancel()
	deadline := time.Now().Add(time.Second)
	for {
		resp, _ := s.get(t, "http://"+s.addrs.Admin+"/readyz")
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %d a second after shutdown began, want 503 during the drain delay", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp, body := s.get(t, "http://"+s.addrs.Serve+"/x"); resp.StatusCode != 200 || body != "still here" {
		t.Fatalf("a new request during the drain delay: %d %q", resp.StatusCode, body)
	}
	select {
	case err := <-s.done:
		t.Fatalf("Run returned during the drain delay: %v", err)
	default:
	}
	releaseOrigin()
	if err := <-inflight; err != nil {
		t.Fatalf("the request in flight at shutdown: %v", err)
	}
	s.client.CloseIdleConnections()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the drain delay")
	}
}

func TestProfilesAreServedOnlyWhenAskedAndNeverTheCommandLine(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer origin.Close()
	for _, tc := range []struct {
		name  string
		extra []string
		want  map[string]int
	}{
		{"without --admin-pprof there are no profiles", nil, map[string]int{
			"/debug/pprof/": 404, "/debug/pprof/heap": 404, "/debug/pprof/cmdline": 404,
		}},
		{"with --admin-pprof there are profiles but no command line", []string{"--admin-pprof", "--purge-token", "s3cret-purge-token-0123"}, map[string]int{
			"/debug/pprof/": 200, "/debug/pprof/heap": 200, "/debug/pprof/cmdline": 404,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, origin.URL, tc.extra...)
			defer s.stop(t)
			for path, code := range tc.want {
				resp, body := s.get(t, "http://"+s.addrs.Admin+path)
				if resp.StatusCode != code {
					t.Errorf("%s: %d, want %d", path, resp.StatusCode, code)
				}
				if strings.Contains(body, "s3cret-purge-token") {
					t.Errorf("%s shows the purge token", path)
				}
			}
		})
	}
}
