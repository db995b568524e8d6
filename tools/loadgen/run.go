package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
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
	// URL is absolute, or origin-form ("/path?query") in a run over
	// Config.Bases or Config.BasesFile: then each request goes to the next
	// base URL, and the path is the key that KeyStats counts.
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

// Generator makes the target of a run's n-th request (n counts from 0
// across all workers), for key spaces too large to list: see Flood.
type Generator interface {
	Target(n uint64) Target
}

// Config describes one closed-loop run: Concurrency workers each send a
// request, read the whole answer, and send the next, until Duration has
// passed or MaxRequests have been sent, whichever comes first.
type Config struct {
	Targets []Target
	// Chooser picks targets; nil means round robin (worker w starts at
	// target w).
	Chooser Chooser
	// Generator, when set, makes every request's target instead of
	// Targets and Chooser; KeyStats then counts nothing.
	Generator   Generator
	Concurrency int
	Duration    time.Duration
	MaxRequests int64
	// Timeout bounds one request, body included.
	Timeout time.Duration
	Seed    uint64
	// Bases, or the file BasesFile names (one URL a line, re-read every
	// BasesReload while the run goes on), are the servers origin-form
	// targets are sent to, in turn. At most one of the two is set; with
	// neither, every target is an absolute URL.
	Bases       []string
	BasesFile   string
	BasesReload time.Duration // 0: DefaultBasesReload
	// OnBasesChange, when set, is called on the watcher's goroutine with
	// each change it records in Result.BaseChanges (refused lists too), as
	// it records it: a caller (a test) can act once a reload happened.
	OnBasesChange func(BaseChange)
	// Host, when set, is sent as every request's Host header, whatever
	// server the request goes to: replicas behind one Service all see the
	// Service's name, and the host is part of a cache key.
	Host string
	// Interval, when set, splits the result into a timeline of intervals
	// of this length.
	Interval time.Duration
	// Slow is the latency from which an answer counts as slow (Result's
	// SlowXCache, a Tally's Slow); 0 means DefaultSlow.
	Slow time.Duration
	// OriginStats is the demo origin's /stats URL: its counters are reset
	// before the run, polled at the end of each interval (with Interval)
	// and read after the run.
	OriginStats string
	// Transport replaces the tuned loopback-only transport; tests use it.
	Transport http.RoundTripper
}

// Bounds of the timeline and of the bases file's reload period, and the
// default slow-answer threshold.
const (
	DefaultSlow        = 100 * time.Millisecond
	MinInterval        = 100 * time.Millisecond
	MaxIntervals       = 10000
	DefaultBasesReload = 200 * time.Millisecond
	MinBasesReload     = 10 * time.Millisecond
)

func (c Config) usesBases() bool { return len(c.Bases) > 0 || c.BasesFile != "" }

// Validate checks the config; errors name the flag.
func (c Config) Validate() error {
	switch {
	case len(c.Targets) == 0 && c.Generator == nil:
		return errors.New("no target URL")
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return fmt.Errorf("--concurrency: must be between 1 and %d", MaxConcurrency)
	case c.Duration <= 0 || c.Duration > MaxDuration:
		return fmt.Errorf("--duration: must be > 0 and <= %s", MaxDuration)
	case c.MaxRequests < 1:
		return errors.New("--max-requests: must be >= 1")
	case c.Timeout <= 0:
		return errors.New("--timeout: must be > 0")
	case c.Host != "" && !validHost(c.Host):
		return fmt.Errorf("--host: %q is not a host[:port]", c.Host)
	case len(c.Bases) > 0 && c.BasesFile != "":
		return errors.New("--base and --bases-file: give one or the other")
	case c.BasesReload != 0 && c.BasesReload < MinBasesReload:
		return fmt.Errorf("bases reload period: must be >= %s", MinBasesReload)
	case c.Interval != 0 && c.Interval < MinInterval:
		return fmt.Errorf("--interval: must be 0 (no timeline) or >= %s", MinInterval)
	case c.Interval != 0 && c.Duration/c.Interval > MaxIntervals:
		return fmt.Errorf("--interval: at most %d intervals per run (--duration / --interval)", MaxIntervals)
	case c.Slow < 0:
		return errors.New("--slow: must be >= 0")
	}
	if len(c.Bases) > 0 {
		if _, err := NewBases(c.Bases); err != nil {
			return err
		}
	}
	if c.OriginStats != "" {
		if err := CheckLoopback(c.OriginStats); err != nil {
			return fmt.Errorf("--origin-stats: %w", err)
		}
	}
	targets := c.Targets
	if c.Generator != nil {
		targets = []Target{c.Generator.Target(0)}
	}
	for _, t := range targets {
		originForm := strings.HasPrefix(t.URL, "/")
		switch {
		case c.usesBases() && !originForm:
			return fmt.Errorf("target %q: with --base or --bases-file targets are paths (/path?query)", t.URL)
		case c.usesBases():
		case originForm:
			return fmt.Errorf("target %q: a path needs --base or --bases-file", t.URL)
		default:
			if err := CheckLoopback(t.URL); err != nil {
				return err
			}
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
	bases, err := runBases(cfg)
	if err != nil {
		return nil, err
	}
	tr := cfg.Transport
	if tr == nil {
		own := NewTransport(cfg.Concurrency)
		defer own.CloseIdleConnections()
		tr = own
	}
	client := NewClient(tr, cfg.Timeout)
	var statsClient *http.Client
	if cfg.OriginStats != "" {
		st := NewTransport(1)
		defer st.CloseIdleConnections()
		statsClient = NewClient(st, 5*time.Second)
		if err := ResetOriginStats(ctx, statsClient, cfg.OriginStats); err != nil {
			return nil, err
		}
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()

	var issued atomic.Int64
	var generated atomic.Uint64
	keys := newKeyCounters(cfg.Targets)
	slow := cfg.Slow
	if slow == 0 {
		slow = DefaultSlow
	}
	workers := make([]*workerStats, cfg.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	var changes []BaseChange // written by the watcher, read after wg.Wait
	if cfg.BasesFile != "" {
		period := cfg.BasesReload
		if period == 0 {
			period = DefaultBasesReload
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			bases.watch(runCtx, cfg.BasesFile, period, func(urls []string, err error) {
				c := BaseChange{T: time.Since(start).Seconds(), Bases: urls}
				if err != nil {
					c.Error = err.Error()
				}
				changes = append(changes, c)
				if cfg.OnBasesChange != nil {
					cfg.OnBasesChange(c)
				}
			})
		}()
	}
	var samples *originSamples
	if statsClient != nil && cfg.Interval > 0 {
		samples = newOriginSamples(cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			samples.poll(runCtx, statsClient, cfg.OriginStats, start, cfg.Interval)
		}()
	}
	for w := range workers {
		ws := newWorkerStats(slow)
		workers[w] = ws
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(cfg.Seed, uint64(w)))
			next := w
			for runCtx.Err() == nil && issued.Add(1) <= cfg.MaxRequests {
				var i int
				var t Target
				switch {
				case cfg.Generator != nil:
					i, t = -1, cfg.Generator.Target(generated.Add(1)-1)
				case cfg.Chooser != nil:
					i = cfg.Chooser.Choose(r)
					t = cfg.Targets[i]
				default:
					i = next % len(cfg.Targets)
					next++
					t = cfg.Targets[i]
				}
				u, base := t.URL, ""
				if bases != nil {
					base = bases.Next()
					u = base + t.URL
				}
				a, ok := one(runCtx, client, u, cfg.Host, t.Missing, ws)
				if !ok {
					continue
				}
				if i >= 0 {
					keys.record(i, a.xcache)
				}
				ws.slice(base, a, start, cfg.Interval, bases != nil)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	res := newResult()
	res.StartedAt = start
	res.Concurrency = cfg.Concurrency
	res.Targets = len(cfg.Targets)
	res.SlowMs = float64(slow) / 1e6
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
	ks := keys.stats()
	res.Keys = &ks
	res.BaseChanges = changes
	if statsClient != nil {
		// The run's context may be done (Ctrl-C); the count is still wanted.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		s, err := ReadOriginStats(sctx, statsClient, cfg.OriginStats)
		if err != nil {
			return nil, err
		}
		res.Origin = &s
	}
	res.finish(elapsed)
	if cfg.Interval > 0 {
		res.timeline(workers, cfg.Interval, cfg.Duration, elapsed, bases != nil, samples)
	}
	return res, nil
}

// runBases returns the run's base list, nil when targets are absolute.
func runBases(cfg Config) (*Bases, error) {
	switch {
	case len(cfg.Bases) > 0:
		return NewBases(cfg.Bases)
	case cfg.BasesFile != "":
		urls, err := ReadBasesFile(cfg.BasesFile)
		if err != nil {
			return nil, err
		}
		b, err := NewBases(urls)
		if err != nil {
			return nil, fmt.Errorf("--bases-file %s: %w", cfg.BasesFile, err)
		}
		return b, nil
	}
	return nil, nil
}

// answer is what one request gave.
type answer struct {
	failed  bool   // a transport error
	isErr   bool   // failed, or a status that counts as an error
	xcache  string // NormalizeXCache of the X-Cache header
	latency time.Duration
	slow    bool // latency >= Config.Slow
}

// one sends one request and records its outcome in ws. ok is false when
// the request was cut off by the end of the run and is not counted.
func one(ctx context.Context, client *http.Client, url, host string, missing bool, ws *workerStats) (a answer, ok bool) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		ws.transportError(err)
		return answer{failed: true, isErr: true}, true
	}
	if host != "" {
		req.Host = host
	}
	resp, err := client.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	latency := time.Since(start)
	if err != nil && ctx.Err() != nil {
		return answer{}, false // cut off by the end of the run
	}
	if err != nil {
		ws.transportError(err)
		return answer{failed: true, isErr: true, latency: latency}, true
	}
	xc, isErr := ws.response(resp, missing, latency)
	return answer{isErr: isErr, xcache: xc, latency: latency, slow: latency >= ws.slowFrom}, true
}

// validHost accepts a host name or IP literal with an optional port: what
// may go in a Host header.
func validHost(h string) bool {
	if len(h) > 255 {
		return false
	}
	u, err := url.Parse("http://" + h)
	return err == nil && u.Host == h && u.Hostname() != "" && u.User == nil
}
