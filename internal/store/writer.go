package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store/l2"
)

// job is one queued L2 operation: an entry write, or (e == nil) a sampled
// hit for the hotness set.
type job struct {
	key  string
	e    *entry.Entry // a private copy
	ttl  time.Duration
	seq  uint64 // from pendingWrites.add
	size int64  // charged to the queue's byte budget
}

// enqueueSet queues an L2 write of e without blocking: when the queue is
// full (in entries or bytes), L2 is known to be failing, or the store is
// closed, the write is dropped and counted.
func (s *Layered) enqueueSet(key string, e *entry.Entry, ttl time.Duration) {
	if s.closed.Load() || len(s.q) == cap(s.q) || s.br.refusing() {
		s.m.L2Dropped.Inc()
		return
	}
	n := entry.EncodedSize(e)
	size := int64(n + len(key))
	if s.queued.Add(size) > s.queueBytes {
		s.queued.Add(-size)
		s.m.L2Dropped.Inc()
		return
	}
	// The caller keeps e and key (the proxy reuses its buffers), so the job
	// holds copies: the entry re-decoded from its own encoding, so that
	// nothing in it aliases the caller's memory.
	c := new(entry.Entry)
	if err := entry.Decode(entry.Encode(make([]byte, 0, n), e), c); err != nil {
		s.queued.Add(-size) // unreachable: our own encoding always decodes
		return
	}
	key = strings.Clone(key)
	seq := s.pending.add(key)
	select {
	case s.q <- job{key: key, e: c, ttl: ttl, seq: seq, size: size}:
	default:
		s.pending.remove(key, seq)
		s.queued.Add(-size)
		s.m.L2Dropped.Inc()
	}
}

// sampleHit queues one in hotEvery hits for the hotness set. Hits yield to
// entry writes: they are only queued while the queue is less than half
// full, and are never counted as dropped.
func (s *Layered) sampleHit(key string) {
	if s.hotEvery <= 0 || s.l2 == nil {
		return
	}
	// rand/v2's top-level functions use a per-thread generator: no shared
	// counter for the hit path to contend on.
	if s.hotEvery > 1 && rand.Uint32N(uint32(s.hotEvery)) != 0 {
		return
	}
	if s.closed.Load() || len(s.q) >= cap(s.q)/2 {
		return
	}
	select {
	case s.q <- job{key: strings.Clone(key)}:
	default:
	}
}

// writer drains the queue in batches until the store closes, then flushes
// what is left (see Close).
func (s *Layered) writer() {
	defer s.wg.Done()
	w := &batchWriter{
		s:     s,
		batch: make([]job, 0, s.batchSize),
		items: make([]l2.Item, 0, s.batchSize),
	}
	for {
		select {
		case j := <-s.q:
			w.batch = s.drain(append(w.batch[:0], j))
		case <-s.stop:
			// Closing: flush until the queue is empty.
			if w.batch = s.drain(w.batch[:0]); len(w.batch) == 0 {
				return
			}
		}
		if s.writeCtx().Err() != nil {
			w.drop() // closing, and past the flush deadline
		} else {
			w.write()
		}
	}
}

// drain appends queued jobs to batch without waiting, up to a full batch.
func (s *Layered) drain(batch []job) []job {
	for len(batch) < s.batchSize {
		select {
		case j := <-s.q:
			batch = append(batch, j)
		default:
			return batch
		}
	}
	return batch
}

// batchWriter is one writer's reusable state.
type batchWriter struct {
	s     *Layered
	batch []job
	items []l2.Item
}

// write sends the batch's entries in one SetMany, then its hits.
func (w *batchWriter) write() {
	s := w.s
	defer w.release()
	w.items = w.items[:0]
	hits := 0
	for i := range w.batch {
		j := &w.batch[i]
		if j.e == nil {
			hits++
			continue
		}
		// A newer write of the key is queued, or the key was deleted
		// since: this one must not land.
		if s.pending.take(j.key, j.seq) {
			w.items = append(w.items, l2.Item{Key: j.key, Entry: j.e, TTL: j.ttl})
		}
	}
	ctx := s.writeCtx()
	if len(w.items) > 0 {
		err := s.call(ctx, s.bulkTimeout, opSet, func(ctx context.Context) error {
			return s.l2.SetMany(ctx, w.items)
		})
		switch {
		case errors.Is(err, ErrUnavailable):
			s.m.L2Dropped.Add(float64(len(w.items)))
		case err != nil && ctx.Err() != nil:
			// Cut short by Close's flush deadline.
			s.m.L2Dropped.Add(float64(len(w.items)))
			s.shutdownDrops.Add(int64(len(w.items)))
		}
		// A Delete that ran while these were being written may have
		// reached Redis first; delete those keys again so that a purge
		// is never undone by a write queued before it.
		if again := s.pending.landed(w.items); len(again) > 0 {
			_ = s.call(ctx, s.bulkTimeout, opDelete, func(ctx context.Context) error {
				return s.l2.Delete(ctx, again...)
			})
		}
		if err != nil {
			return // L2 is not well: the hits are not worth a wait
		}
	}
	for i := 0; i < len(w.batch) && hits > 0; i++ {
		j := &w.batch[i]
		if j.e != nil {
			continue
		}
		hits--
		err := s.call(ctx, s.timeout, opSet, func(ctx context.Context) error {
			return s.l2.RecordHit(ctx, j.key)
		})
		if err != nil {
			return
		}
	}
}

// drop discards the batch, counting its entry writes.
func (w *batchWriter) drop() {
	defer w.release()
	n := 0
	for i := range w.batch {
		if w.batch[i].e != nil && w.s.pending.take(w.batch[i].key, w.batch[i].seq) {
			w.s.pending.landed([]l2.Item{{Key: w.batch[i].key}})
			n++
		}
	}
	w.s.m.L2Dropped.Add(float64(n))
	w.s.shutdownDrops.Add(int64(n))
}

// release returns the batch's bytes to the queue budget and lets go of
// its entries.
func (w *batchWriter) release() {
	var n int64
	for i := range w.batch {
		n += w.batch[i].size
	}
	w.s.queued.Add(-n)
	clear(w.batch)
	clear(w.items)
}

// pendingWrites tracks which queued write of a key is the newest and which
// keys are being written, so that a Delete (a purge) is never undone by a
// write that was queued before it: Delete cancels the key's queued write,
// and a write already on its way to Redis is followed by another delete.
// It also spares Redis a write that a newer one of the same key replaces.
type pendingWrites struct {
	mu     sync.Mutex
	seq    uint64
	latest map[string]uint64  // key → seq of its newest queued write
	flying map[string]*flight // keys being written
}

type flight struct {
	n       int  // writes of the key in flight
	deleted bool // Delete ran meanwhile
}

func newPendingWrites() *pendingWrites {
	return &pendingWrites{latest: make(map[string]uint64), flying: make(map[string]*flight)}
}

// add records a queued write of key and returns its sequence number.
func (p *pendingWrites) add(key string) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	p.latest[key] = p.seq
	return p.seq
}

// remove forgets a write that could not be queued after all.
func (p *pendingWrites) remove(key string, seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.latest[key] == seq {
		delete(p.latest, key)
	}
}

// take reports whether the dequeued write seq of key should go to Redis
// (it is the newest, and the key was not deleted since it was queued) and
// if so marks the key as in flight, until landed.
func (p *pendingWrites) take(key string, seq uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.latest[key] != seq {
		return false
	}
	delete(p.latest, key)
	f := p.flying[key]
	if f == nil {
		f = new(flight)
		p.flying[key] = f
	}
	f.n++
	return true
}

// landed ends the flights of items' keys and returns those deleted while
// in flight.
func (p *pendingWrites) landed(items []l2.Item) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var again []string
	for _, it := range items {
		f := p.flying[it.Key]
		if f == nil {
			continue
		}
		if f.deleted {
			again = append(again, it.Key)
		}
		if f.n--; f.n == 0 {
			delete(p.flying, it.Key)
		}
	}
	return again
}

// cancel drops key's queued write, if any: a newer value went to Redis
// directly.
func (p *pendingWrites) cancel(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.latest, key)
}

// deletedAll is deleted for every key.
func (p *pendingWrites) deletedAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.latest)
	for _, f := range p.flying {
		f.deleted = true
	}
}

// deleted cancels key's queued write and marks its flights as deleted.
func (p *pendingWrites) deleted(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.latest, key)
	if f := p.flying[key]; f != nil {
		f.deleted = true
	}
}
