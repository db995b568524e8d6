package store

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store/l2"
)

// File-backed entries (entry.File set: the body is in a file of the body
// store) reach L2 only with their body: the body's chunks first, then the
// entry with File.Chunks set, so that a replica that sees the entry can
// copy the body (ReadBody). QueueBody does it off the request path
// through a queue of its own; ShareBody does it at once, for the holder of
// a fetch lease whose waiters must see the entry only once the body is
// there. SetWithBody and SetSharedWithBody are Set and SetShared followed
// by those. Set and SetShared keep a file-backed entry in L1 only:
// a body the caller does not hand over (above the tier's l2.maxBodySize)
// stays local to this replica, and its entry out of L2.

// BodyReader is an open body for an L2 write: read at offsets (the body's
// own, from 0), closed once written. It is an alias of an unnamed type so
// that a consumer (the proxy) can name it without importing this package.
type BodyReader = interface {
	io.ReaderAt
	io.Closer
}

// OpenBody opens the body of the entry being written. The queue calls it
// only when the write's turn comes, so that waiting writes hold no file
// and no memory; a body that is gone by then (evicted, purged, replaced)
// drops the write. An alias, like BodyReader.
type OpenBody = func() (BodyReader, error)

// DefaultBodyQueueBytes is Options.BodyQueueBytes' default.
const DefaultBodyQueueBytes = 256 << 20

// bodyQueueSize is the number of body writes that may wait.
const bodyQueueSize = 256

// ErrBodyCorrupt: a body read from L2 does not have the CRC of its
// reference. It matches ErrNotFound (a miss).
var ErrBodyCorrupt = fmt.Errorf("%w: body from L2 fails its CRC", ErrNotFound)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// bodyJob is one queued write of a file-backed entry.
type bodyJob struct {
	key  string
	e    *entry.Entry // a private copy
	ttl  time.Duration
	seq  uint64
	size int64 // charged to the body queue's byte budget
	open OpenBody
}

// SetWithBody stores e, whose body is in a file (e.File set), under key:
// in L1 at once (as given), and in L2 through the body queue (QueueBody).
// An entry without File is Set. SetWithBody does not retain key or e.
func (s *Layered) SetWithBody(ctx context.Context, key string, e *entry.Entry, open OpenBody) error {
	if e.File == nil {
		return s.Set(ctx, key, e)
	}
	if err := s.l1.Set(key, e); err != nil {
		return err
	}
	s.QueueBody(key, e, open)
	return nil
}

// SetSharedWithBody is SetWithBody with the L2 write made now
// (ShareBody). An L2 failure is returned; L1 is set regardless.
func (s *Layered) SetSharedWithBody(ctx context.Context, key string, e *entry.Entry, open OpenBody) error {
	if e.File == nil {
		return s.SetShared(ctx, key, e)
	}
	if err := s.l1.Set(key, e); err != nil {
		return err
	}
	return s.ShareBody(ctx, key, e, open)
}

// QueueBody writes e, whose body is in a file (e.File set), to L2 only,
// through the body queue, never waiting for it: the body's chunks (read
// from what open returns; when the chunks of this body id are in L2
// already, as after a revalidation, only their TTL is extended), then the
// entry with File.Chunks set. A full queue (bodyQueueSize writes, or
// Options.BodyQueueBytes bytes of bodies waiting), an open breaker or a
// closed store drop the write and count it. An entry without File, or
// past all use, is not written. QueueBody does not retain key or e.
func (s *Layered) QueueBody(key string, e *entry.Entry, open OpenBody) {
	if s.l2 == nil || open == nil || e.File == nil {
		return
	}
	ttl := l2TTL(e, s.now(), s.grace)
	if ttl <= 0 || !fitsL2(e.File) {
		return
	}
	if s.closed.Load() || len(s.bq) == cap(s.bq) || s.br.refusing() {
		s.m.L2Dropped.Inc()
		return
	}
	size := e.File.Size + int64(entry.EncodedSize(e)+len(key))
	if s.bodyQueued.Add(size) > s.bodyQueueBytes {
		s.bodyQueued.Add(-size)
		s.m.L2Dropped.Inc()
		return
	}
	c, err := copyEntry(e)
	if err != nil {
		s.bodyQueued.Add(-size)
		return
	}
	key = strings.Clone(key)
	seq := s.pending.add(key)
	select {
	case s.bq <- bodyJob{key: key, e: c, ttl: ttl, seq: seq, size: size, open: open}:
	default:
		s.pending.remove(key, seq)
		s.bodyQueued.Add(-size)
		s.m.L2Dropped.Inc()
	}
}

// ShareBody is QueueBody with the write made now: the holder of a fetch
// lease uses it so that the replicas polling GetNewer see the entry
// only once its body is in L2, and at once then. It is bounded by ctx and,
// inside, per chunk (l2.Client.ChunkTimeout) and per entry write
// (Timeout). An L2 failure, an open breaker (ErrUnavailable) or a body
// that cannot be opened is returned.
func (s *Layered) ShareBody(ctx context.Context, key string, e *entry.Entry, open OpenBody) error {
	if s.l2 == nil || open == nil || e.File == nil {
		return nil
	}
	ttl := l2TTL(e, s.now(), s.grace)
	if ttl <= 0 || !fitsL2(e.File) {
		return nil
	}
	c, err := copyEntry(e)
	if err != nil {
		return err
	}
	// Any write of the key still queued is older than this one; and a
	// Delete while this one is on its way must not be undone by it.
	item := []l2.Item{{Key: key}}
	s.pending.take(key, s.pending.add(key))
	err = s.writeBody(ctx, key, c, ttl, open)
	if again := s.pending.landed(item); len(again) > 0 {
		_ = s.call(ctx, s.bulkTimeout, opDelete, func(ctx context.Context) error {
			return s.l2.Delete(ctx, again...)
		})
	}
	if err != nil {
		return fmt.Errorf("store: sharing a body: %w", err)
	}
	return nil
}

// DropLocal removes key from L1 only, and only while the entry L1 holds
// under it refers to the body file id (its body or one of its pieces):
// the caller found that file gone (or damaged) on this replica. That
// says nothing about the shared tier: L2 keeps the entry and its chunks,
// from which this replica copies the body back, and the other replicas
// keep serving them. An entry stored under key meanwhile (a refresh, with
// a body of its own) is newer and stays.
func (s *Layered) DropLocal(key string, id [16]byte) {
	s.l1.DeleteIf(key, func(e *entry.Entry) bool { return e.RefersTo(id) })
}

// ReadBody copies the body ref names from L2 into dst and checks its
// length and CRC against ref. A body that is not (wholly) in L2 is
// ErrNotFound, and so is one that fails its CRC (ErrBodyCorrupt); an L2
// failure is returned as is, and ErrUnavailable when the breaker is
// open. When ReadBody fails dst may have received a part of the body:
// the caller discards it (aborts its file). It is bounded by ctx and per
// chunk (l2.Client.ChunkTimeout).
func (s *Layered) ReadBody(ctx context.Context, ref entry.BodyFile, dst io.Writer) error {
	if s.l2 == nil || ref.Chunks == 0 {
		return ErrNotFound
	}
	w := &crcWriter{w: dst}
	err := s.call(ctx, 0, opGet, func(ctx context.Context) error {
		return s.l2.GetBody(ctx, ref.ID, ref.Size, ref.Chunks, w)
	})
	switch {
	case errors.Is(err, l2.ErrNotFound), errors.Is(err, l2.ErrBodySize):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case err != nil:
		return err
	case w.n != ref.Size || w.crc != ref.CRC:
		return ErrBodyCorrupt
	}
	return nil
}

// crcWriter passes writes on and sums them.
type crcWriter struct {
	w   io.Writer
	crc uint32
	n   int64
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	c.n += int64(n)
	return n, err
}

// fitsL2 reports whether a body can be chunked into L2 at all.
func fitsL2(f *entry.BodyFile) bool {
	return f.Size > 0 && f.Size <= l2.MaxChunks*l2.ChunkSize
}

// copyEntry returns a copy of e sharing nothing with it (the caller keeps
// e; the proxy reuses its buffers): e re-decoded from its own encoding.
func copyEntry(e *entry.Entry) (*entry.Entry, error) {
	c := new(entry.Entry)
	if err := entry.Decode(entry.Encode(nil, e), c); err != nil {
		return nil, fmt.Errorf("store: copying an entry: %w", err) // unreachable
	}
	return c, nil
}

// writeBody puts e's body into L2 unless it is there already, then e with
// File.Chunks set, each step through the breaker. e is the caller's
// private copy; its File.Chunks is set.
func (s *Layered) writeBody(ctx context.Context, key string, e *entry.Entry, ttl time.Duration, open OpenBody) error {
	ref := e.File
	var there bool
	err := s.call(ctx, 0, opSet, func(ctx context.Context) (err error) {
		there, err = s.l2.ExtendBody(ctx, ref.ID, ref.Size, ttl)
		return err
	})
	if err != nil {
		return err
	}
	n := l2.ChunksFor(ref.Size)
	if !there {
		r, err := open()
		if err != nil {
			return fmt.Errorf("opening the body: %w", err)
		}
		err = s.call(ctx, 0, opSet, func(ctx context.Context) (err error) {
			n, err = s.l2.SetBody(ctx, ref.ID, r, ref.Size, ttl)
			return err
		})
		_ = r.Close()
		if err != nil {
			return err
		}
	}
	ref.Chunks = n
	return s.call(ctx, s.timeout, opSet, func(ctx context.Context) error {
		return s.l2.Set(ctx, key, e, ttl)
	})
}

// bodyWriter writes the queued bodies one at a time until the store
// closes, then what it can of the rest within Close's flush deadline.
func (s *Layered) bodyWriter() {
	defer s.wg.Done()
	for {
		var j bodyJob
		select {
		case j = <-s.bq:
		case <-s.stop:
			select {
			case j = <-s.bq:
			default:
				return
			}
		}
		s.writeBodyJob(&j)
	}
}

func (s *Layered) writeBodyJob(j *bodyJob) {
	defer s.bodyQueued.Add(-j.size)
	// A newer write of the key is queued, or the key was deleted since.
	if !s.pending.take(j.key, j.seq) {
		return
	}
	ctx := s.writeCtx()
	item := []l2.Item{{Key: j.key}}
	if ctx.Err() != nil {
		s.pending.landed(item)
		s.m.L2Dropped.Inc()
		s.shutdownDrops.Add(1)
		return
	}
	err := s.writeBody(ctx, j.key, j.e, j.ttl, j.open)
	if err != nil {
		s.m.L2Dropped.Inc()
		s.log.Debug("file-backed entry not written to L2", "err", err)
	}
	// A Delete that ran meanwhile may have reached Redis first: delete
	// again (entry and chunks), so that a purge is never undone.
	if again := s.pending.landed(item); len(again) > 0 {
		_ = s.call(ctx, s.bulkTimeout, opDelete, func(ctx context.Context) error {
			return s.l2.Delete(ctx, again...)
		})
	}
}
