package proxy

import (
	"context"
	"errors"
	"io"
	"io/fs"

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

// openShared opens the body of e, an entry with its body in L2 chunks,
// copying it into a local file first when this replica has none: one
// copy per body id at a time, which concurrent requests for it wait for
// (each as long as its own request lasts). ok false means a miss.
func (p *Proxy) openShared(ctx context.Context, key string, e *entry.Entry) (*bodystore.Body, bool) {
	ref := *e.File
	ch := p.copies.DoChan(string(ref.ID[:]), func() (any, error) {
		return nil, p.copyBody(key, detach(e))
	})
	select {
	case res := <-ch:
		if res.Err != nil && !errors.Is(res.Err, bodystore.ErrExists) {
			p.log.Debug("body not copied from L2; treated as a miss", "key", key, "err", res.Err)
			return nil, false
		}
	case <-ctx.Done():
		return nil, false
	}
	b, err := p.bodies.Open(key, ref)
	if err != nil {
		return nil, false
	}
	return b, true
}

// copyBody copies the body of e (stored under key, in L2 chunks) into a
// local file with the same id. It runs on the Proxy's context: a client
// that leaves does not cut a copy that others wait for.
func (p *Proxy) copyBody(key string, e *entry.Entry) error {
	ref := *e.File
	w, err := p.bodies.CreateWithID(ref.ID, key, ref.Size)
	if err != nil {
		return err
	}
	if err := p.shb.ReadBody(p.ctx, ref, w); err != nil {
		w.Abort()
		return err
	}
	_, err = w.Commit(func(got entry.BodyFile) []byte {
		m := *e
		got.Chunks = ref.Chunks
		m.File, m.Body = &got, nil
		return entry.Encode(nil, &m)
	})
	return err
}

// isGone reports whether err says a body file does not exist here.
func isGone(err error) bool { return errors.Is(err, fs.ErrNotExist) }
