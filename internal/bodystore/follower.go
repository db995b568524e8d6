package bodystore

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Follow returns a reader of the body as it grows, for the waiters of a
// collapsed fill: Read blocks until more is written, returns io.EOF after
// Commit once everything is read, and an error when the writer breaks or
// is aborted, once it has read every byte written before that. (The fill's
// own client follows the file too; when the file fails it goes on from
// the origin where the file stopped, so it must be able to read that far.)
// Each follower has its own file descriptor; Close it.
func (w *Writer) Follow() *Follower {
	fo := &Follower{w: w}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.state {
	case writing:
		fo.f, fo.err = os.Open(w.tmpPath())
	case committed:
		fo.f, fo.err = os.Open(w.bodyPath())
	default:
		fo.err = w.abortErr()
	}
	if fo.err != nil && w.state != aborted {
		fo.err = fmt.Errorf("bodystore: following a fill: %w", fo.err)
	}
	return fo
}

// abortErr is what followers of an aborted or broken writer get; w.mu
// held.
func (w *Writer) abortErr() error {
	if w.err == nil || errors.Is(w.err, ErrAborted) {
		return ErrAborted
	}
	return fmt.Errorf("%w: %w", ErrAborted, w.err)
}

// Follower reads a body while it is being written.
type Follower struct {
	w      *Writer
	f      *os.File
	err    error // set at Follow: every Read returns it
	pos    int64
	closed bool // guarded by w.mu
}

// wait blocks until there are bytes after f.pos, and returns how many;
// io.EOF when the body is committed (and released, see HoldEnd) and all
// read; the writer's error when it broke or was aborted and every byte
// written before is read; ErrClosed when f is closed. (The temp file of
// an aborted writer is unlinked, but f's descriptor still reads it.)
func (f *Follower) wait() (int64, error) {
	if f.err != nil {
		return 0, f.err
	}
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for f.pos >= w.shown() && (w.state == writing || w.held) && w.err == nil && !f.closed {
		w.cond.Wait()
	}
	switch {
	case f.closed:
		return 0, ErrClosed
	case f.pos < w.shown():
		return w.shown() - f.pos, nil
	case w.err != nil:
		return 0, w.abortErr()
	}
	return 0, io.EOF // committed, released, all read
}

// shown is how much of the body followers may read: what is written,
// but the last byte of an announced length while the end is held; w.mu
// held.
func (w *Writer) shown() int64 {
	if w.held && w.err == nil && w.hint > 0 && w.written == w.hint {
		return w.written - 1
	}
	return w.written
}

// errCut is what a follower gets when the file holds fewer bytes than the
// writer reported written: someone cut it under us.
var errCut = fmt.Errorf("bodystore: following a fill: %w", io.ErrUnexpectedEOF)

// Read reads the next bytes of the body, waiting for the writer when it
// has read everything written so far.
func (f *Follower) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, f.err
	}
	avail, err := f.wait()
	if err != nil {
		return 0, err
	}
	n := int(min(int64(len(p)), avail))
	n, err = f.f.ReadAt(p[:n], headerSize+f.pos)
	f.pos += int64(n)
	if err == io.EOF {
		err = errCut
	}
	return n, err
}

// WriteTo writes the body to dst as it grows, until it is committed (nil)
// or the writer fails (its error). Each piece goes as an *io.LimitedReader
// over the follower's *os.File, so io.Copy(responseWriter, follower)
// reaches the TCP connection's ReadFrom and the waiters of a collapsed
// fill are served with sendfile too.
func (f *Follower) WriteTo(dst io.Writer) (int64, error) {
	var total int64
	for {
		avail, err := f.wait()
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		if _, err := f.f.Seek(headerSize+f.pos, io.SeekStart); err != nil {
			return total, err
		}
		n, err := io.Copy(dst, &io.LimitedReader{R: f.f, N: avail})
		total += n
		f.pos += n
		if err != nil {
			return total, err
		}
		if n < avail {
			return total, errCut
		}
	}
}

// Close releases the follower's descriptor and wakes a Read blocked in
// it, which returns ErrClosed.
func (f *Follower) Close() error {
	w := f.w
	w.mu.Lock()
	already := f.closed
	f.closed = true
	w.cond.Broadcast()
	w.mu.Unlock()
	if already || f.f == nil {
		return nil
	}
	return f.f.Close()
}
