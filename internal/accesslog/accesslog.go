// Package accesslog owns the sidecar's access log: one JSON line per
// request (the shape of log/slog's JSON handler: time, level, msg, then
// the request's fields) written to the sidecar's stdout.
//
// It sits on the hit path, so a line costs no allocation: it is encoded
// by appending into a pooled buffer (encode.go; slog's generic attributes
// allocated per request, see bench_test.go) and copied into a bounded
// buffer that one goroutine writes out periodically (buffer.go). A slow
// stdout never blocks a request: when the buffer is full, lines are
// dropped and counted in tiercache_access_log_dropped_total.
//
// What is logged is the tier's choice (tierconfig.AccessLog, live with
// every config), each field it leaves unset falling back to the sidecar's
// flags (Defaults). Header values are never logged, nor the query unless
// the tier lists the parameters that may be.
package accesslog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tiercache/tiercache/internal/originview"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Defaults are the sidecar's flags: what applies where the tier says
// nothing.
type Defaults struct {
	// Enabled is --access-log (default true).
	Enabled bool
	// SamplePercent is --access-log-sample-percent, 1 to 100.
	SamplePercent int
	// ExcludePaths is --access-log-exclude.
	ExcludePaths []string
}

// DefaultDefaults are the flags' defaults: on, every request, nothing
// excluded.
func DefaultDefaults() Defaults { return Defaults{Enabled: true, SamplePercent: 100} }

// Validate checks d, naming the flag.
func (d Defaults) Validate() error {
	var errs []error
	if d.SamplePercent < 1 || d.SamplePercent > 100 {
		errs = append(errs, fmt.Errorf("--access-log-sample-percent: must be between 1 and 100 (got %d)", d.SamplePercent))
	}
	for _, p := range d.ExcludePaths {
		if why := tierconfig.CheckAccessLogPath(p); why != "" {
			errs = append(errs, fmt.Errorf("--access-log-exclude: %s", why))
		}
	}
	return errors.Join(errs...)
}

// Options configure a Logger. Writer is required.
type Options struct {
	// Writer receives the lines, in chunks of whole lines (the sidecar's
	// stdout).
	Writer io.Writer
	// Defaults apply where the tier says nothing.
	Defaults Defaults
	// Registerer takes tiercache_access_log_dropped_total; default: a
	// private registry.
	Registerer prometheus.Registerer
	// BufferSize bounds the lines waiting for Writer, in bytes; past it
	// lines are dropped (default 256Ki; twice that is held at most, one
	// half being written while the other fills).
	BufferSize int
	// FlushInterval is how often waiting lines are written (default 1s);
	// a half-full buffer is written at once.
	FlushInterval time.Duration
	// Rand is the sampling source (default math/rand/v2's); tests pass a
	// deterministic one. It must be safe for concurrent use.
	Rand func() uint64
	// ErrorLog reports write errors of Writer (once per error run);
	// default: none.
	ErrorLog func(error)
}

// Entry is what the proxy knows of one finished request.
type Entry struct {
	// End is when the request finished; Duration how long it took.
	End      time.Time
	Duration time.Duration
	// Status and Bytes are the response's status and the body bytes
	// written (0 for HEAD and 304).
	Status int
	Bytes  int64
	// Result and Layer are the cache result and the layer that answered
	// (the requests_total labels); Rule the matched rule's name.
	Result, Layer, Rule string
	// OriginTime is how long the origin took to answer (to its response
	// headers); 0 when the origin was not asked.
	OriginTime time.Duration
}

// Logger writes access log lines. It is safe for concurrent use; Close
// flushes and stops it.
type Logger struct {
	defaults Defaults
	rand     func() uint64
	buf      *buffer
	dropped  prometheus.Counter
	scratch  sync.Pool // *[]byte line buffers
	// policy is the compiled policy of the last tier config seen.
	policy atomic.Pointer[policy]

	cancel context.CancelFunc
	done   chan struct{}
}

// New checks o and starts the Logger's writer goroutine (Close stops it).
func New(o Options) (*Logger, error) {
	if o.Writer == nil {
		return nil, errors.New("accesslog: a writer is required")
	}
	if err := o.Defaults.Validate(); err != nil {
		return nil, err
	}
	if o.BufferSize == 0 {
		o.BufferSize = 256 << 10
	}
	if o.BufferSize < 4<<10 {
		return nil, fmt.Errorf("accesslog: buffer size must be >= 4Ki (got %d)", o.BufferSize)
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = time.Second
	}
	if o.FlushInterval < 0 {
		return nil, fmt.Errorf("accesslog: flush interval must be > 0 (got %s)", o.FlushInterval)
	}
	if o.Rand == nil {
		o.Rand = rand.Uint64
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	l := &Logger{defaults: o.Defaults, rand: o.Rand}
	l.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tiercache_access_log_dropped_total",
		Help: "Access log lines dropped because the log's buffer was full (a slow stdout) or writing failed.",
	})
	if err := o.Registerer.Register(l.dropped); err != nil {
		return nil, fmt.Errorf("accesslog: registering metrics: %w", err)
	}
	l.buf = newBuffer(o.BufferSize, l.dropped)
	l.scratch.New = func() any { b := make([]byte, 0, 512); return &b }
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel, l.done = cancel, make(chan struct{})
	tick := time.NewTicker(o.FlushInterval)
	go func() {
		defer close(l.done)
		defer tick.Stop()
		l.buf.run(ctx, o.Writer, tick.C, o.ErrorLog)
	}()
	return l, nil
}

// Close writes the lines still waiting and stops the writer goroutine,
// waiting for it at most until ctx ends (a Writer that never returns
// keeps it).
func (l *Logger) Close(ctx context.Context) error {
	l.cancel()
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("accesslog: flushing the last lines: %w", ctx.Err())
	}
}

// policyFor returns the policy of c, compiling it when c is a config not
// seen before (config pushes are rare; requests share the result).
func (l *Logger) policyFor(c *tierconfig.Compiled) *policy {
	if p := l.policy.Load(); p != nil && p.src == c {
		return p
	}
	p := newPolicy(c, l.defaults)
	l.policy.Store(p)
	return p
}

// Log writes the line of r, answered as e says, under config c, unless
// the policy leaves it out (off, excluded, not sampled).
func (l *Logger) Log(r *http.Request, c *tierconfig.Compiled, e *Entry) {
	p := l.policyFor(c)
	if !p.enabled {
		return
	}
	path, query := splitTarget(r)
	if p.excluded(path) {
		return
	}
	if p.sample < 100 && e.Status < 500 && l.rand()%100 >= uint64(p.sample) {
		return
	}
	bp := l.scratch.Get().(*[]byte)
	line := appendLine((*bp)[:0], r, e, path, query, p)
	l.buf.add(line)
	*bp = line
	if cap(line) <= 8<<10 {
		l.scratch.Put(bp)
	}
}

// splitTarget returns the path and query of r as received (RequestURI),
// or from its URL when it has none (a request built in-process). An
// absolute-form target ("http://user:password@host/p?q") is logged by its
// parsed path and query only: its scheme, host and userinfo (a password)
// never reach a line, and path exclusions see the path.
func splitTarget(r *http.Request) (path, query string) {
	if r.RequestURI == "" {
		return r.URL.Path, r.URL.RawQuery
	}
	if r.RequestURI != "*" && !strings.HasPrefix(r.RequestURI, "/") {
		return r.URL.EscapedPath(), r.URL.RawQuery
	}
	path, query, _ = strings.Cut(r.RequestURI, "?")
	return path, query
}

// policy is a tier config's access log settings, merged with the
// defaults and compiled.
type policy struct {
	src     *tierconfig.Compiled
	enabled bool
	sample  int
	exact   []string
	prefix  []string
	query   tierconfig.QueryLog
	xff     bool
}

func newPolicy(c *tierconfig.Compiled, d Defaults) *policy {
	a := c.Config.AccessLog
	p := &policy{src: c, enabled: d.Enabled, sample: d.SamplePercent, xff: a.TrustForwardedFor}
	if a.Enabled != nil {
		p.enabled = *a.Enabled
	}
	if a.SamplePercent != 0 {
		p.sample = int(a.SamplePercent)
	}
	exclude := d.ExcludePaths
	if a.ExcludePaths != nil {
		exclude = a.ExcludePaths
	}
	for _, s := range exclude {
		if t, ok := strings.CutSuffix(s, "*"); ok {
			p.prefix = append(p.prefix, t)
		} else {
			p.exact = append(p.exact, s)
		}
	}
	p.query = tierconfig.NewQueryLog(a.QueryParams)
	return p
}

// excluded reports whether the request with path (as received) is left
// out of the log: only when every reading of the path is excluded
// (originview.Readings), so that "/internal/../admin", which rules and
// decoding origins read as "/admin", is logged although it starts with an
// excluded "/internal/".
func (p *policy) excluded(path string) bool {
	if len(p.exact) == 0 && len(p.prefix) == 0 {
		return false
	}
	if originview.Canonical(path) {
		return p.excludes(path)
	}
	ps := originview.Readings(path)
	return ps.Every(p.excludes)
}

// excludes reports whether one reading of a path is excluded.
func (p *policy) excludes(path string) bool {
	for _, s := range p.exact {
		if path == s {
			return true
		}
	}
	for _, s := range p.prefix {
		if strings.HasPrefix(path, s) {
			return true
		}
	}
	return false
}

// client returns the address logged as the client's: the connection's
// peer, or with trustForwardedFor the last X-Forwarded-For entry when it
// is an IP address.
func (p *policy) client(r *http.Request) string {
	if p.xff {
		if v := r.Header["X-Forwarded-For"]; len(v) > 0 {
			last := v[len(v)-1]
			if i := strings.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			last = strings.TrimSpace(last)
			if _, err := netip.ParseAddr(last); err == nil {
				return last
			}
		}
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}
