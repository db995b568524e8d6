package proxy

import (
	"bytes"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/httpcache"
)

// Where the bytes of a part go as they arrive (partSink), and the copy
// from the origin that feeds it and the client (copyPart).

// partSink keeps the bytes of a part as they arrive: in memory (an
// inline part) or in a piece file (partialfile.go), never both, so a
// piece costs no memory beyond the copy buffer. A nil *partSink keeps
// nothing.
type partSink struct {
	mem  []byte
	file *bodystore.Writer
	// abort aborts file, from its own goroutine, once the fill's store
	// bound passes: the part is written at its client's pace, and a
	// client that stops reading must not hold the piece's reservation in
	// the body store (which evicts other bodies) for as long as it
	// stalls.
	abort *time.Timer
	on    bool // still keeping: no write failed, no bound was passed
}

// newSink returns where the part pd of c's fill is kept: a piece file
// (created under pl.key, sized by pd.Span, aborted at storeBy if still
// being written) for a part of a large representation, else memory. nil
// when the body store refuses the piece: the part is then forwarded and
// not stored.
func (p *Proxy) newSink(c *call, r *http.Request, pl placement, pd httpcache.PartialDecision, storeBy time.Time) *partSink {
	if !p.piecesMode(c.cfg, pd.Length, pd.Span) {
		return &partSink{mem: make([]byte, 0, spanLen(pd.Span)), on: true}
	}
	fw, err := p.bodies.Create(pl.key, spanLen(pd.Span))
	if err != nil {
		p.log.Debug("part not stored: the body store refused its piece", "path", r.URL.Path, "err", err)
		return nil
	}
	return &partSink{file: fw, abort: time.AfterFunc(time.Until(storeBy), fw.Abort), on: true}
}

func (s *partSink) keeping() bool { return s != nil && s.on }

// kept reports whether every byte given to keep was kept.
func (s *partSink) kept() bool { return s.keeping() }

func (s *partSink) keep(b []byte) {
	if s.file != nil {
		if _, err := s.file.Write(b); err != nil {
			s.stop()
		}
		return
	}
	s.mem = append(s.mem, b...)
}

// stop stops keeping; what was kept is dropped.
func (s *partSink) stop() {
	if s != nil {
		s.on, s.mem = false, nil
	}
}

// discard drops what s kept: a piece file being written is removed.
func (s *partSink) discard() {
	if s == nil {
		return
	}
	s.stop()
	if s.file != nil {
		s.abort.Stop()
		s.file.Abort()
	}
}

// copyPart reads the body of a 206 that names span, to its end. The bytes
// within clip go to w (nil: nobody) as they arrive; sink, while it keeps,
// gets the bytes as long as they stay within span. exact reports that the
// body was exactly span's bytes. With hold (and a sink keeping), the
// piece that brings w the last byte of clip within span is returned as
// held (a copy) instead of written, for the caller to send once the part
// is stored. A body longer than span stops the sink: with overflow the
// excess goes to w as well (the client gets what the origin sent),
// without it copyPart stops at once (exact false). It keeps reading after
// w has gone for as long as the sink keeps.
func (p *Proxy) copyPart(w http.ResponseWriter, body io.Reader, span, clip httpcache.ByteRange, sink *partSink, hold, overflow bool,
	late *atomic.Bool, written *int64) (held []byte, exact bool, err error) {
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	buf := *bp
	last := min(clip.End, span.End) // the last byte w gets of span
	pos := span.Start               // the position of the next byte read
	for {
		n, rerr := body.Read(buf)
		if sink.keeping() && late.Load() {
			sink.stop()
		}
		if n > 0 {
			chunk := buf[:n]
			end := pos + int64(n) - 1
			if end > span.End {
				sink.stop()
				if !overflow {
					return nil, false, nil
				}
				w = writeSome(w, held, written)
				held = nil
			}
			if sink.keeping() {
				sink.keep(chunk)
			}
			if a, b := max(pos, clip.Start), min(end, clip.End); a <= b {
				out := chunk[a-pos : b-pos+1]
				if hold && sink.keeping() && b == last {
					held = bytes.Clone(out)
				} else {
					w = writeSome(w, out, written)
				}
			}
			pos = end + 1
		}
		if rerr == io.EOF {
			return held, pos == span.End+1, nil
		}
		if rerr != nil {
			return nil, false, rerr
		}
		if w == nil && !sink.keeping() {
			return nil, false, nil
		}
	}
}

// writeSome writes b to w and flushes, adds what w took to *written, and
// returns w, or nil once a write failed (the client left). A nil w writes
// nothing.
func writeSome(w http.ResponseWriter, b []byte, written *int64) http.ResponseWriter {
	if w == nil || len(b) == 0 {
		return w
	}
	k, err := w.Write(b)
	*written += int64(k)
	if err != nil {
		return nil
	}
	_ = http.NewResponseController(w).Flush()
	return w
}
