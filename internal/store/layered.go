package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/store/l1"
	"github.com/tiercache/tiercache/internal/store/l2"
)

var (
	// ErrNotFound is a miss in every layer consulted.
	ErrNotFound = errors.New("store: not found")
	// ErrUnavailable means L2 was not asked: there is none, or the circuit
	// breaker is open because it is failing.
	ErrUnavailable = errors.New("store: L2 unavailable")
)

// Layer names returned by Get, as in the X-Cache header and metrics.
const (
	LayerL1 = metrics.LayerL1
	LayerL2 = metrics.LayerL2
)

// Defaults of Options.
const (
	DefaultTimeout           = l2.DefaultTimeout
	DefaultQueueSize         = 4096
	DefaultQueueBytes        = 64 << 20
	DefaultWriters           = 2
	DefaultBatchSize         = 64
	DefaultRevalidationGrace = time.Hour
	DefaultHotSampleEvery    = 64
)

const (
	// flushTimeout bounds how long Close spends writing what is queued.
	flushTimeout = time.Second
	// minBulkTimeout is the floor of the bound on one batch write, which
	// carries up to BatchSize entries (each socket operation is also
	// bounded by L2's own timeout).
	minBulkTimeout = time.Second
)

// Options configure a Layered store.
type Options struct {
	// L1 is the in-process cache; required. Layered uses it but does not
	// own it: Close leaves it open.
	L1 *l1.Cache
	// L2 is the Redis tier; nil means L1 only. Not owned either.
	L2 *l2.Client
	// Timeout bounds every L2 call made on a request's behalf (default
	// 50ms).
	Timeout time.Duration
	// Metrics; required.
	Metrics *metrics.Metrics
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
	// QueueSize is the number of L2 writes that may wait (default 4096).
	QueueSize int
	// QueueBytes bounds the encoded size of the entries waiting (default
	// 64 MiB): QueueSize entries of the largest size would otherwise be
	// QueueSize × MaxEntrySize of memory.
	QueueBytes int64
	// BodyQueueBytes bounds the bytes of the bodies of file-backed entries
	// waiting to be written to L2 (SetWithBody; default 256 MiB). The
	// queue holds no body (each is read from its file when its turn
	// comes): this bounds the backlog of transfers to Redis.
	BodyQueueBytes int64
	// Writers is the number of goroutines writing to L2 (default 2).
	Writers int
	// BatchSize is the most writes sent in one pipeline (default 64).
	BatchSize int
	// RevalidationGrace is added to the L2 TTL (and to how long an entry
	// is worth keeping at all) of responses with an ETag or Last-Modified:
	// past their stale windows they still save a full fetch through a
	// conditional one (default 1h; negative means none).
	RevalidationGrace time.Duration
	// Breaker tunes the L2 circuit breaker.
	Breaker BreakerConfig
	// HotSampleEvery: one in this many cache hits (either layer) is
	// recorded in L2 for WarmStart. 0 means the default, 64; negative
	// turns sampling off.
	HotSampleEvery int
}

// Validate reports every problem with o, each naming its field.
func (o Options) Validate() error {
	var errs []error
	if o.L1 == nil {
		errs = append(errs, errors.New("store.l1: required"))
	}
	if o.Metrics == nil {
		errs = append(errs, errors.New("store.metrics: required"))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"timeout", int64(o.Timeout)},
		{"queueSize", int64(o.QueueSize)},
		{"queueBytes", o.QueueBytes},
		{"bodyQueueBytes", o.BodyQueueBytes},
		{"writers", int64(o.Writers)},
		{"batchSize", int64(o.BatchSize)},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("store.%s: must be >= 0, 0 meaning the default (got %d)", f.name, f.v))
		}
	}
	errs = append(errs, o.Breaker.validate()...)
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.QueueSize == 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.QueueBytes == 0 {
		o.QueueBytes = DefaultQueueBytes
	}
	if o.BodyQueueBytes == 0 {
		o.BodyQueueBytes = DefaultBodyQueueBytes
	}
	if o.Writers == 0 {
		o.Writers = DefaultWriters
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	switch {
	case o.RevalidationGrace == 0:
		o.RevalidationGrace = DefaultRevalidationGrace
	case o.RevalidationGrace < 0:
		o.RevalidationGrace = 0
	}
	if o.HotSampleEvery == 0 {
		o.HotSampleEvery = DefaultHotSampleEvery
	}
	return o
}

// L2 operations, as the op label of l2_errors_total.
const (
	opGet = iota
	opSet
	opDelete
	opLease
	numOps
)

var opNames = [numOps]string{"get", "set", "delete", "lease"}

// Layered is the sidecar's Store: L1 in front of an optional L2. It is
// safe for concurrent use.
type Layered struct {
	l1 *l1.Cache
	// afterL2Get, when set (tests only), runs when an L2 read returns,
	// before its promotion: a seam to force a purge into that window.
	afterL2Get func()
	l2         *l2.Client // nil: L1 only

	timeout     time.Duration
	bulkTimeout time.Duration
	grace       time.Duration
	hotEvery    int
	now         func() time.Time
	log         *slog.Logger
	m           *metrics.Metrics
	errs        [numOps]prometheus.Counter
	br          *breaker

	// Async L2 writes. The writers flush and stop when stop closes; flush
	// is set just before, and bounds the flush (see writeCtx).
	q          chan job
	queued     atomic.Int64 // bytes of the jobs in q and in flight
	queueBytes int64
	batchSize  int
	pending    *pendingWrites
	// Writes of file-backed entries with their bodies (body.go): a queue
	// and one writer of their own, so that entry writes never wait
	// behind a body's transfer.
	bq             chan bodyJob
	bodyQueued     atomic.Int64 // bytes of the bodies in bq and in flight
	bodyQueueBytes int64
	flush          atomic.Pointer[context.Context]
	stop           chan struct{}
	wg             sync.WaitGroup
	renewers       sync.WaitGroup // lease renewals (lease.go), also ended by stop

	closed        atomic.Bool
	closeOnce     sync.Once
	stopAfter     func() bool
	shutdownDrops atomic.Int64
}

// New checks o and returns a Layered store whose L2 writers run until ctx
// ends or Close is called. New never panics.
func New(ctx context.Context, o Options) (*Layered, error) {
	if ctx == nil {
		return nil, errors.New("store: nil context")
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	s := &Layered{
		l1:             o.L1,
		l2:             o.L2,
		timeout:        o.Timeout,
		bulkTimeout:    max(o.Timeout, minBulkTimeout),
		grace:          o.RevalidationGrace,
		hotEvery:       o.HotSampleEvery,
		now:            o.Now,
		log:            o.Logger,
		m:              o.Metrics,
		queueBytes:     o.QueueBytes,
		bodyQueueBytes: o.BodyQueueBytes,
		batchSize:      o.BatchSize,
		pending:        newPendingWrites(),
		stop:           make(chan struct{}),
	}
	for op, name := range opNames {
		s.errs[op] = o.Metrics.L2Errors.WithLabelValues(name)
	}
	s.br = newBreaker(o.Breaker, o.Now, s.breakerChanged)
	s.m.L2CircuitOpen.Set(0)
	if s.l2 == nil {
		// Nothing to write: no queue, no writers.
		s.q = make(chan job)
		s.bq = make(chan bodyJob)
		s.closed.Store(true)
		s.stopAfter = func() bool { return false }
		return s, nil
	}
	s.q = make(chan job, o.QueueSize)
	s.bq = make(chan bodyJob, bodyQueueSize)
	s.wg.Add(o.Writers + 1)
	for range o.Writers {
		go s.writer()
	}
	go s.bodyWriter()
	s.stopAfter = context.AfterFunc(ctx, func() { _ = s.Close() })
	return s, nil
}

// Get decodes the entry stored under key into e (an L1 hit reuses e's
// slices) and returns the layer that had it. An L2 hit is promoted into L1 unchanged
// (with its own times, so with the lifetime it has left). Every error is a
// miss: ErrNotFound, or the L2 failure. While the breaker is open Get
// does not touch L2. Get does not retain key.
func (s *Layered) Get(ctx context.Context, key string, e *entry.Entry) (string, error) {
	if err := s.l1.GetInto(key, e); err == nil {
		s.sampleHit(key)
		return LayerL1, nil
	}
	if s.l2 == nil {
		return "", ErrNotFound
	}
	var v entry.Entry
	removals := s.l1.Removals()
	err := s.call(ctx, s.timeout, opGet, func(ctx context.Context) (err error) {
		v, err = s.l2.Get(ctx, key)
		return err
	})
	switch {
	case errors.Is(err, l2.ErrNotFound), errors.Is(err, ErrUnavailable):
		return "", ErrNotFound
	case err != nil:
		return "", err
	}
	if s.afterL2Get != nil {
		s.afterL2Get()
	}
	// A purge while L2 answered may have removed this very entry after
	// L2 read it: then it is served this once, not copied into L1.
	if s.l1.Removals() == removals {
		s.promote(key, &v)
	}
	*e = v
	s.sampleHit(key)
	return LayerL2, nil
}

// promote copies an L2 hit into L1, unless it is past all use (clocks of
// replicas differ, and Redis expiry is not exact). An entry L1 refuses as
// too large simply stays in L2 only.
func (s *Layered) promote(key string, e *entry.Entry) {
	if !s.now().Before(usefulUntil(e, s.grace)) {
		return
	}
	_ = s.l1.Set(key, e)
}

// Set stores e under key: in L1 at once, and in L2 through the write
// queue, never waiting for it (a full queue drops the write and counts
// it). A file-backed entry (e.File set) goes to L1 only: SetWithBody
// writes one to L2 with its body. A partial response (entry.KindPartial)
// goes to L1 only, always. An entry L1 refuses (l1.ErrTooLarge)
// is not written to L2 either,
// and the error is returned. Set does not retain key or e.
func (s *Layered) Set(ctx context.Context, key string, e *entry.Entry) error {
	if err := s.l1.Set(key, e); err != nil {
		return err
	}
	if s.l2 == nil {
		return nil
	}
	if e.File != nil || e.Kind == entry.KindPartial {
		// A file's body is not handed over (see body.go), and a partial
		// response is local to this replica: the entry stays out of L2,
		// and no older write of the key may land after it.
		s.pending.cancel(key)
		return nil
	}
	if ttl := l2TTL(e, s.now(), s.grace); ttl > 0 {
		s.enqueueSet(key, e, ttl)
	}
	return nil
}

// SetShared is Set with the L2 write made now, bounded by Timeout: the
// holder of a fetch lease uses it so that the replicas polling
// GetNewer see the fill at once. An L2 failure (or an open breaker,
// ErrUnavailable) is returned; L1 is set regardless.
func (s *Layered) SetShared(ctx context.Context, key string, e *entry.Entry) error {
	if err := s.l1.Set(key, e); err != nil {
		return err
	}
	if s.l2 == nil {
		return nil
	}
	if e.File != nil || e.Kind == entry.KindPartial {
		// As in Set: L1 only.
		s.pending.cancel(key)
		return nil
	}
	ttl := l2TTL(e, s.now(), s.grace)
	if ttl <= 0 {
		return nil
	}
	// Any write of the key still queued is older than this one.
	s.pending.cancel(key)
	err := s.call(ctx, s.timeout, opSet, func(ctx context.Context) error {
		return s.l2.Set(ctx, key, e, ttl)
	})
	if err != nil {
		return fmt.Errorf("store: shared set: %w", err)
	}
	return nil
}

// Delete removes key from L1, and from L2 synchronously, bounded by
// Timeout. An L2 failure is counted and returned, and so is ErrUnavailable
// when the breaker is open: the key may still be in L2. L1 is cleared in
// every case, and a write of key still queued is cancelled.
func (s *Layered) Delete(ctx context.Context, key string) error {
	s.l1.Delete(key)
	if s.l2 == nil {
		return nil
	}
	s.pending.deleted(key)
	err := s.call(ctx, s.timeout, opDelete, func(ctx context.Context) error {
		return s.l2.Delete(ctx, key)
	})
	if errors.Is(err, ErrUnavailable) {
		s.errs[opDelete].Inc()
	}
	if err != nil {
		return fmt.Errorf("store: delete: %w", err)
	}
	return nil
}

// Forget cancels the queued L2 writes of keys and has writes of them
// already on their way deleted again once they land, so that a purge that
// deletes the keys from L2 by other means (the purger's exact keys) is not
// undone by a fill stored just before it.
func (s *Layered) Forget(keys ...string) {
	if s.l2 == nil {
		return
	}
	for _, k := range keys {
		s.pending.deleted(k)
	}
}

// ForgetAll is Forget for every key: for purges by tag or prefix, whose
// keys are found in L2 by other means.
func (s *Layered) ForgetAll() {
	if s.l2 == nil {
		return
	}
	s.pending.deletedAll()
}

// call makes one L2 call through the breaker: refused (ErrUnavailable)
// while it is open, else fn runs bounded by bound, and its outcome is
// reported to the breaker and its failure counted under op (bound 0: ctx
// is the only bound). parent is the caller's context: a call it cancels is
// neither a failure nor a success.
func (s *Layered) call(parent context.Context, bound time.Duration, op int, fn func(context.Context) error) error {
	t, ok := s.br.allow()
	if !ok {
		return ErrUnavailable
	}
	ctx, cancel := parent, context.CancelFunc(func() {})
	if bound > 0 {
		ctx, cancel = context.WithTimeout(parent, bound)
	}
	err := fn(ctx)
	cancel()
	o := classify(parent, err)
	s.br.done(t, o)
	if err != nil && o != neutral && !errors.Is(err, l2.ErrNotFound) {
		s.errs[op].Inc()
	}
	return err
}

// breakerChanged is the breaker's onChange: the gauge follows every
// change, and the log says when L2 is given up on and when it is back,
// once each (failed probes are only debug).
func (s *Layered) breakerChanged(from, to breakerState, openFor time.Duration) {
	if to == closed {
		s.m.L2CircuitOpen.Set(0)
	} else {
		s.m.L2CircuitOpen.Set(1)
	}
	switch {
	case from == closed && to == open:
		s.log.Warn("L2 is failing: circuit breaker open, serving from L1 and origin only", "retry_in", openFor)
	case to == closed:
		s.log.Info("L2 is back: circuit breaker closed")
	case to == open:
		s.log.Debug("L2 still failing: circuit breaker open again", "retry_in", openFor)
	default:
		s.log.Debug("circuit breaker half-open: probing L2")
	}
}

// Close stops the L2 writers, first giving them a second to write what is
// queued; what is left after that is dropped and counted. (A batch already
// on its way when Close is called still runs to its own bound, L2's
// timeout per socket operation.) Close leaves L1 and L2 open (they are the
// caller's) and always returns nil; the store must not be used afterwards
// except for Close.
func (s *Layered) Close() error {
	s.closeOnce.Do(func() {
		s.stopAfter()
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		s.flush.Store(&ctx)
		s.closed.Store(true)
		close(s.stop)
		s.wg.Wait()
		s.renewers.Wait()
		if n := s.shutdownDrops.Load(); n > 0 {
			s.log.Warn("dropped queued L2 writes at shutdown", "writes", n, "flush_timeout", flushTimeout)
		}
	})
	return nil
}

// writeCtx is the parent context of the writers' L2 calls: none until
// Close, then the flush deadline. (go-redis bounds a call by its context's
// deadline, not by its cancellation, so the flush needs a deadline.)
func (s *Layered) writeCtx() context.Context {
	if ctx := s.flush.Load(); ctx != nil {
		return *ctx
	}
	return context.Background()
}
