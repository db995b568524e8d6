package proxy

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/entry"
)

// Bodies kept in files are local to a replica. Those up to the tier's
// l2.maxBodySize are also copied into L2 in chunks (SharedBodies), before
// the entry that refers to them, so that another replica serves them
// without an origin fetch: it copies the chunks into a file of its own
// under the same id, then serves that file like any other (sendfile).
// Copying first and serving after (rather than streaming to the client
// while copying) keeps one way of serving a body file, and the cap bounds
// the wait: 16 MiB from Redis takes tens of milliseconds. Concurrent
// requests for a body that is being copied wait for that one copy.
//
// A body above the cap stays local: its entry is not written to L2, and
// the fill gives up the tier-wide lease as soon as it knows the size, so
// that the other replicas fetch for themselves at once instead of waiting
// for an entry that will not come.

// bodyReader is an open body for an L2 write (store.BodyReader).
type bodyReader = interface {
	io.ReaderAt
	io.Closer
}

// SharedBodies copies bodies kept in files through the shared tier (L2)
// in chunks; store.Layered implements it. A Cluster that also implements
// it (and a Proxy with Bodies) shares bodies up to the tier's
// l2.maxBodySize.
type SharedBodies interface {
	// QueueBody writes e (e.File set) to L2 after its body, which open
	// reads, off the request path.
	QueueBody(key string, e *entry.Entry, open func() (bodyReader, error))
	// ShareBody does the same now: the entry is visible to the other
	// replicas only once its body is in L2.
	ShareBody(ctx context.Context, key string, e *entry.Entry, open func() (bodyReader, error)) error
	// ReadBody copies the body ref names from L2 into dst, checking its
	// length and CRC; any error leaves dst to be discarded.
	ReadBody(ctx context.Context, ref entry.BodyFile, dst io.Writer) error
}

// sharesBody reports whether a body file of size bytes goes to L2 too.
func (p *Proxy) sharesBody(c *call, size int64) bool {
	return p.shb != nil && size > 0 && size <= int64(c.cfg.Config.L2MaxBodySize())
}

// shareBody writes the file-backed entry e, just stored in L1 under key,
// to L2 with its body. A fill holding the tier-wide lease hands the lease
// over: it is released only once the entry is in L2 (or the write
// failed), so that the replicas waiting for it see the entry with its
// body, while the client's response is not held up by the copy. The
// write runs on the Proxy's context and Close waits for it.
func (p *Proxy) shareBody(c *call, key string, e *entry.Entry) {
	if e.File == nil || !p.sharesBody(c, e.File.Size) {
		return
	}
	open := p.bodyOpener(key, *e.File)
	if !c.shared {
		p.shb.QueueBody(key, e, open)
		return
	}
	release := c.release
	c.release, c.shared = nil, false
	le := detach(e)
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		if release != nil {
			defer release()
		}
		if err := p.shb.ShareBody(p.ctx, key, le, open); err != nil {
			p.log.Debug("body not shared in L2", "key", key, "err", err)
		}
	}()
}

// bodyOpener opens the body file ref names for key, for reading at
// offsets.
func (p *Proxy) bodyOpener(key string, ref entry.BodyFile) func() (bodyReader, error) {
	return func() (bodyReader, error) {
		b, err := p.bodies.Open(key, ref)
		if err != nil {
			return nil, err
		}
		return bodyAt{b}, nil
	}
}

// bodyAt reads a body file at offsets, through sections of it.
type bodyAt struct{ b *bodystore.Body }

func (r bodyAt) ReadAt(p []byte, off int64) (int, error) {
	return io.ReadFull(r.b.Section(off, int64(len(p))), p)
}

func (r bodyAt) Close() error { return r.b.Close() }

const (
	// maxBodyCopies bounds the copies of bodies from L2 running at once on
	// a Proxy: each holds up to two 1 MiB chunks (and go-redis's read
	// buffers for them), so four hold about 8-16 MiB however many requests
	// want bodies copied.
	maxBodyCopies = 4
	// copySlotWait bounds how long a copy waits for a slot (or less, when
	// the tier's coalescing.timeout is less): from a healthy Redis a 16 MiB
	// body copies in tens of milliseconds, so a quarter second lets dozens
	// of queued copies through, and slots taken for longer mean that Redis
	// is slow and the origin is the better source. A request may try a
	// copy up to three times (its lookup, and the re-checks of the
	// collapsed miss), so it waits at most three times this.
	copySlotWait = 250 * time.Millisecond
)

// errCopiesBusy: every copy slot stayed taken for copySlotWait.
var errCopiesBusy = errors.New("every copy of a body from L2 is busy")

// errNotShareable: a body reference that no replica of this tier writes to
// L2: larger than l2.maxBodySize (or empty). It is stale (the cap was
// lowered since) or forged, and is not acted on.
var errNotShareable = errors.New("body reference above l2.maxBodySize")

// bodyLost handles e, whose body file this replica cannot use (gone: the
// body store evicted it, it was deleted under the sidecar; damaged; not
// this key's): bodyMissing unless the body is copied back.
//
// Whatever happened to the file happened on this replica only, so nothing
// is deleted from L2: the shared entry and its chunks serve the other
// replicas, and this one. An entry that refers to L2 chunks (Chunks > 0:
// another replica's fill, or one copied back) was tried already by
// openShared; it stays, and the fill that follows the miss replaces it.
// This replica's own fill (Chunks 0: its L1 entry does not count the
// chunks it wrote to L2 after storing it) leaves L1, but only if L1 still
// holds that very body (never a newer entry stored meanwhile), and its
// body is copied back from L2's entry when that names the same body.
func (p *Proxy) bodyLost(ctx context.Context, key string, e *entry.Entry) (*bodystore.Body, bodyState) {
	if e.File.Chunks > 0 {
		return nil, bodyMissing
	}
	p.store.DropLocal(key, e.File.ID)
	if p.shb == nil {
		return nil, bodyMissing
	}
	// L1 has no entry for key now (or a newer one, which is not e's body):
	// this looks in L2, and promotes what it finds into L1.
	var in2 entry.Entry
	if _, err := p.store.Get(ctx, key, &in2); err != nil || in2.Kind != entry.KindResponse ||
		in2.File == nil || in2.File.ID != e.File.ID || in2.File.Chunks == 0 {
		return nil, bodyMissing
	}
	c := detach(e)
	c.File.Chunks = in2.File.Chunks
	return p.openShared(ctx, key, c)
}

// openShared opens the body of e, an entry with its body in L2 chunks,
// copying it into a local file first when this replica has none: one
// copy per body id at a time, which concurrent requests for it wait for
// (each as long as its own request lasts), and at most maxBodyCopies
// copies at once (a copy that finds every slot taken for copySlotWait is
// not made: a miss). A reference larger than the tier's l2.maxBodySize is
// refused before anything is read or reserved: no replica writes such a
// body to L2. A local file that cannot be created or opened for now
// (bodystore.Transient: out of descriptors) is bodyBusy: the request
// passes, and the entry stays for the next one to copy.
func (p *Proxy) openShared(ctx context.Context, key string, e *entry.Entry) (*bodystore.Body, bodyState) {
	ref := *e.File
	cfg := p.cfg.Load().Config
	if ref.Size <= 0 || ref.Size > int64(cfg.L2MaxBodySize()) {
		p.log.Debug("body in L2 not copied; treated as a miss", "key", key, "size", ref.Size, "err", errNotShareable)
		return nil, bodyMissing
	}
	wait := min(copySlotWait, cfg.Coalescing.Timeout.Std())
	// The copy outlives a request that leaves: it gets a key of its own,
	// never one that aliases the request's pooled key buffer (the next
	// request's key would name its file).
	ck := strings.Clone(key)
	ch := p.copies.DoChan(string(ref.ID[:]), func() (any, error) {
		return nil, p.copyBody(ck, detach(e), wait)
	})
	select {
	case res := <-ch:
		if bodystore.Transient(res.Err) {
			p.log.Debug("body not copied from L2 for now; passed to the origin", "key", key, "err", res.Err)
			return nil, bodyBusy
		}
		if res.Err != nil && !errors.Is(res.Err, bodystore.ErrExists) {
			p.log.Debug("body not copied from L2; treated as a miss", "key", key, "err", res.Err)
			return nil, bodyMissing
		}
	case <-ctx.Done():
		return nil, bodyMissing
	}
	b, err := p.bodies.Open(key, ref)
	switch {
	case err == nil:
		return b, bodyOpened
	case bodystore.Transient(err):
		return nil, bodyBusy
	}
	return nil, bodyMissing
}

// copyBody copies the body of e (stored under key, in L2 chunks) into a
// local file with the same id, once one of the copy slots is free (waiting
// at most wait). It runs on the Proxy's context: a client that leaves does
// not cut a copy that others wait for.
//
// The file is created when the first chunk has arrived, and its budget
// grows as chunks arrive: a reference to chunks that are not in L2 (forged,
// or evicted by Redis) reserves nothing and so evicts no local body, and a
// copy that fails half-way has evicted at most what it received. Each
// chunk's length is checked as it arrives (l2.Client.GetBody), the whole
// body's length and CRC at the end (ReadBody), and Commit checks them
// again against the entry it stores in the file.
func (p *Proxy) copyBody(key string, e *entry.Entry, wait time.Duration) error {
	if err := p.takeCopySlot(wait); err != nil {
		return err
	}
	defer func() { <-p.copySlots }()

	ref := *e.File
	dst := &copyDst{bodies: p.bodies, id: ref.ID, key: key}
	if err := p.shb.ReadBody(p.ctx, ref, dst); err != nil {
		dst.abort()
		return err
	}
	if dst.w == nil {
		return errors.New("copying a body from L2: no chunk was written") // unreachable: ReadBody checks the length
	}
	_, err := dst.w.Commit(func(entry.BodyFile) []byte {
		m := *e
		m.File, m.Body = &ref, nil
		return entry.Encode(nil, &m)
	})
	return err
}

// takeCopySlot takes one of the copy slots, waiting at most wait for one
// to be free: errCopiesBusy when none is.
func (p *Proxy) takeCopySlot(wait time.Duration) error {
	select {
	case p.copySlots <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case p.copySlots <- struct{}{}:
		return nil
	case <-t.C:
		return errCopiesBusy
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
}

// copyDst is the file a copy from L2 writes to, created (without a size:
// its budget grows as written) at the first write, that is once the first
// chunks have arrived.
type copyDst struct {
	bodies *bodystore.Store
	id     [16]byte
	key    string
	w      *bodystore.Writer
}

func (d *copyDst) Write(b []byte) (int, error) {
	if d.w == nil {
		w, err := d.bodies.CreateWithID(d.id, d.key, -1)
		if err != nil {
			return 0, err
		}
		d.w = w
	}
	return d.w.Write(b)
}

func (d *copyDst) abort() {
	if d.w != nil {
		d.w.Abort()
	}
}

// isGone reports whether err says a body file does not exist here.
func isGone(err error) bool { return errors.Is(err, fs.ErrNotExist) }
