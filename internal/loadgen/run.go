package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Limits that keep every run bounded whatever the flags say.
const (
	MaxDuration    = time.Hour
	MaxConcurrency = 10000
)

// Target is one URL the workers request.
type Target struct {
	URL string
	// Missing marks a URL meant not to exist: its 404 is expected, not an
	// error.
	Missing bool
}

// Chooser picks the index of a worker's next target. Each worker has its
// own *rand.Rand, seeded from Config.Seed and the worker number, so a run's
// sequence of choices per worker is reproducible.
type Chooser interface {
	Choose(r *rand.Rand) int
}

// ChooserFunc adapts a function to Chooser.
type ChooserFunc func(r *rand.Rand) int

// Choose calls f.
func (f ChooserFunc) Choose(r *rand.Rand) int { return f(r) }

// Config describes one closed-loop run: Concurrency workers each send a
// request, read the whole answer, and send the next, until Duration has
// passed or MaxRequests have been sent, whichever comes first.
type Config struct {
	Targets []Target
	// Chooser picks targets; nil means round robin (worker w starts at
	// target w).
	Chooser     Chooser
	Concurrency int
	Duration    time.Duration
	MaxRequests int64
	// Timeout bounds one request, body included.
	Timeout time.Duration
	Seed    uint64
	// Transport replaces the tuned loopback-only transport; tests use it.
	Transport http.RoundTripper
}

// Validate checks the config; errors name the flag.
func (c Config) Validate() error {
	switch {
	case len(c.Targets) == 0:
		return errors.New("no target URL")
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return fmt.Errorf("--concurrency: must be between 1 and %d", MaxConcurrency)
	case c.Duration <= 0 || c.Duration > MaxDuration:
		return fmt.Errorf("--duration: must be > 0 and <= %s", MaxDuration)
	case c.MaxRequests < 1:
		return errors.New("--max-requests: must be >= 1")
	case c.Timeout <= 0:
		return errors.New("--timeout: must be > 0")
	}
	for _, t := range c.Targets {
		if err := CheckLoopback(t.URL); err != nil {
			return err
		}
	}
	return nil
}

// NewTransport returns the transport runs use: keep-alive with one idle
// connection per worker, no compression, no proxy, and a dialer that
// connects to loopback addresses only.
func NewTransport(concurrency int) *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: dialControl}
	return &http.Transport{
		Proxy:               nil,
		DialContext:         d.DialContext,
		MaxIdleConns:        concurrency,
		MaxIdleConnsPerHost: concurrency,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 5 * time.Second,
		DisableCompression:  true,
		ReadBufferSize:      32 << 10,
		WriteBufferSize:     4 << 10,
	}
}

// NewClient returns a client over tr that never follows redirects (a 3xx is
// an answer, and following one could leave loopback).
func NewClient(tr http.RoundTripper, timeout time.Duration) *http.Client {
	return &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Run performs the run described by cfg and returns what it measured.
// Requests still in flight when the run ends are not counted. Cancelling
// ctx ends the run early; the partial result is returned.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tr := cfg.Transport
	if tr == nil {
		own := NewTransport(cfg.Concurrency)
		defer own.CloseIdleConnections()
		tr = own
	}
	client := NewClient(tr, cfg.Timeout)

	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()

	var issued atomic.Int64
	workers := make([]*workerStats, cfg.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		ws := newWorkerStats()
		workers[w] = ws
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(cfg.Seed, uint64(w)))
			next := w
			for runCtx.Err() == nil && issued.Add(1) <= cfg.MaxRequests {
				var i int
				if cfg.Chooser != nil {
					i = cfg.Chooser.Choose(r)
				} else {
					i = next % len(cfg.Targets)
					next++
				}
				one(runCtx, client, cfg.Targets[i], ws)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	res := newResult()
	res.Concurrency = cfg.Concurrency
	res.Targets = len(cfg.Targets)
	for _, ws := range workers {
		res.add(ws)
	}
	switch {
	case issued.Load() > cfg.MaxRequests:
		res.StoppedBy = "max-requests"
	case ctx.Err() != nil:
		res.StoppedBy = "cancelled"
	default:
		res.StoppedBy = "duration"
	}
	res.finish(elapsed)
	return res, nil
}

// one sends one request and records its outcome in ws.
func one(ctx context.Context, client *http.Client, t Target, ws *workerStats) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		ws.transportError(err)
		return
	}
	resp, err := client.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	latency := time.Since(start)
	if err != nil && ctx.Err() != nil {
		return // cut off by the end of the run
	}
	if err != nil {
		ws.transportError(err)
		return
	}
	ws.response(resp, t.Missing, latency)
}
