package controlplane

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// eventually polls cond every 5ms until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: "+format, append([]any{timeout}, args...)...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testServer is a Server serving on a loopback port.
type testServer struct {
	*Server
	addr string
	reg  *prometheus.Registry
	stop func()
}

// startServer serves a new Server on addr ("127.0.0.1:0" for any port);
// it stops at the end of the test unless stopped before.
func startServer(t testing.TB, addr string, opts Options) *testServer {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	s, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener
	// The port of a server just stopped may take a moment to be free.
	for i := 0; ; i++ {
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		if i == 100 {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	var once sync.Once
	ts := &testServer{Server: s, addr: l.Addr().String(), reg: reg}
	ts.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(ts.stop)
	return ts
}

// applied is one call of a test sidecar's Apply.
type applied struct {
	version string
	cfg     tierconfig.Config
	at      time.Time
}

// testSidecar is a Client with an Apply that records every call.
type testSidecar struct {
	*Client
	reg  *prometheus.Registry
	stop func()

	mu      sync.Mutex
	applied []applied
	// fail makes Apply refuse this version.
	fail string
}

type sidecarOpt func(*ClientOptions)

// startSidecar runs a Client for ns/pod in ns/tier against addr; it stops
// at the end of the test unless stopped before. notify, if not nil, gets
// every applied version (it must have room).
func startSidecar(t testing.TB, addr, ns, tier, pod string, notify chan<- applied, opts ...sidecarOpt) *testSidecar {
	t.Helper()
	sc := &testSidecar{reg: prometheus.NewRegistry()}
	o := ClientOptions{
		Target: addr, Namespace: ns, Pod: pod, Tier: tier,
		Registerer: sc.reg,
		Logger:     quiet,
		Backoff:    Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		Apply: func(ctx context.Context, c tierconfig.Config, version string) error {
			a := applied{version: version, cfg: c, at: time.Now()}
			sc.mu.Lock()
			fail := sc.fail
			if version != fail {
				sc.applied = append(sc.applied, a)
			}
			sc.mu.Unlock()
			if version == fail {
				return errors.New("refused by the test")
			}
			if notify != nil {
				notify <- a
			}
			return nil
		},
	}
	for _, opt := range opts {
		opt(&o)
	}
	c, err := NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	sc.Client = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	sc.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(sc.stop)
	return sc
}

// nextApplied returns the next config applied through notify; what names
// the awaited config for the failure when none comes within waitLong.
func nextApplied(t testing.TB, notify <-chan applied, what string) applied {
	t.Helper()
	select {
	case a := <-notify:
		return a
	case <-time.After(waitLong):
		t.Fatalf("%s was not applied within %s", what, waitLong)
		return applied{}
	}
}

func (s *testSidecar) applies() []applied {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]applied(nil), s.applied...)
}
