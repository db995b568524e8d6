package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/connguard"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Parts of large representations live in the body store (docs/caching.md
// "Partial content", Large representations). With a body store, a part of
// a representation longer than the tier's bodyStore.threshold is written,
// as it streams from the origin to the client, to a body file of its own:
// a piece. The partial entry (entry.KindPartial, codec version 4) lists
// its pieces, each the span it answers for, its file and where in the
// file the span starts; it stays in this replica's L1, as inline parts
// do. A newer part trims the pieces it overlaps (its bytes win, RFC 9110
// §15.3.7.3); a piece trimmed to nothing goes, and its file with it once
// no piece uses it. At most entry.MaxPieces pieces: a part that would make
// more replaces the entry alone. Pieces are served with sendfile from
// their files, every file opened before the header is written. Once the
// pieces cover the representation (and it is within
// bodyStore.maxObjectSize), a goroutine of the Proxy copies them into one
// complete body file and stores a complete response in their place
// (completePieces).

// piecesMode reports whether a part of a representation of length bytes
// whose part is span goes to a piece file: with a body store, for a
// representation above the tier's threshold and a part within its
// per-object maximum.
func (p *Proxy) piecesMode(cfg *tierconfig.Compiled, length int64, span httpcache.ByteRange) bool {
	if p.bodies == nil {
		return false
	}
	threshold, maxObject := bodyLimits(cfg)
	return length > threshold && spanLen(span) <= maxObject
}

// pieced reports whether e is a partial response held in piece files.
func pieced(e *entry.Entry) bool { return e.Partial != nil && len(e.Partial.Pieces) > 0 }

// segment is a run of a representation's bytes served from an open piece
// file: the bytes span, which are the file's body bytes from off on.
type segment struct {
	span httpcache.ByteRange
	body *bodystore.Body
	off  int64
}

// segments are open piece files covering a range in order; close them.
type segments []segment

func (ss segments) close() {
	for _, s := range ss {
		_ = s.body.Close()
	}
}

// errPieceLost: a piece file of a stored partial response is gone or is
// not its piece.
var errPieceLost = errors.New("a piece file of the stored partial response cannot be opened")

// maxServedPieces bounds the piece files one response is sent from, each
// an open descriptor for as long as the response lasts. A range across
// more pieces is asked of the origin as the client sent it instead (a
// full GET is fetched whole): its answer, stored as one piece, replaces
// them, so that the next such request is served from one file.
const maxServedPieces = 16

// piecesFor counts the pieces of e that hold bytes of want.
func piecesFor(e *entry.Entry, want httpcache.ByteRange) int {
	n := 0
	for i := range e.Partial.Pieces {
		if pc := &e.Partial.Pieces[i]; pc.Start <= want.End && want.Start <= pc.End {
			n++
		}
	}
	return n
}

// openPieces opens the piece files of e, stored under key, that hold the
// bytes of want, in order. It opens every one of them before anything is
// sent: one that cannot be opened (evicted, removed, not this key's)
// closes the others and returns its id, so that the caller drops the
// entry and treats the request as a miss.
func (p *Proxy) openPieces(key string, e *entry.Entry, want httpcache.ByteRange) (segments, [16]byte, error) {
	var segs segments
	for i := range e.Partial.Pieces {
		pc := &e.Partial.Pieces[i]
		a, b := max(pc.Start, want.Start), min(pc.End, want.End)
		if a > b {
			continue
		}
		if p.bodies == nil {
			segs.close()
			return nil, pc.File.ID, errPieceLost
		}
		body, err := p.bodies.Open(key, pc.File)
		if err != nil {
			p.log.Debug("stored piece unusable", "key", key, "err", err)
			segs.close()
			return nil, pc.File.ID, errPieceLost
		}
		segs = append(segs, segment{span: httpcache.ByteRange{Start: a, End: b}, body: body, off: pc.Offset + a - pc.Start})
	}
	return segs, [16]byte{}, nil
}

// sendSegments writes the bytes r of the segments to w (nil: nobody), each
// with io.Copy from its file, which reaches the connection's ReadFrom
// (sendfile), adding what w took to *written. It returns w, or nil once
// the client has gone or a file could not be read (the response is then
// short: the caller breaks it off).
func sendSegments(w http.ResponseWriter, segs segments, r httpcache.ByteRange, written *int64) (http.ResponseWriter, bool) {
	for _, s := range segs {
		if w == nil {
			return nil, true
		}
		a, b := max(s.span.Start, r.Start), min(s.span.End, r.End)
		if a > b {
			continue
		}
		n := b - a + 1
		k, err := io.Copy(w, s.body.Section(s.off+a-s.span.Start, n))
		*written += k
		if err != nil || k != n {
			return nil, false
		}
	}
	return w, true
}

// servePieces writes the body want of a response whose header is in w
// already, from segs: the header goes out with the first bytes in one
// segment (as serveFile sends it), then every piece with sendfile.
func (p *Proxy) servePieces(w http.ResponseWriter, r *http.Request, segs segments, want httpcache.ByteRange, status int) sent {
	w.WriteHeader(status)
	fl, more := w.(http.Flusher)
	more = more && len(w.Header()["Content-Type"]) > 0
	if more {
		connguard.BodyFollows(r.Context())
		fl.Flush()
	}
	var n int64
	_, ok := sendSegments(w, segs, want, &n)
	if more {
		connguard.Push(r.Context())
	}
	if !ok && r.Context().Err() == nil {
		p.log.Debug("serving a stored piece failed", "path", r.URL.Path)
	}
	return sent{status: status, bytes: n}
}

// dropPart forgets the partial response e under key in this replica's L1
// (only while it still lists the piece file id that could not be
// opened): a request then goes on as if nothing were stored.
func (p *Proxy) dropPart(key string, id [16]byte) {
	p.store.DropLocal(key, id)
}

// addPiece returns pieces (sorted, disjoint) with pc added: the older
// pieces are trimmed to the bytes pc does not hold (a piece pc falls
// inside is split in two, sharing its file), and those left with nothing
// are dropped. pieces is not modified.
func addPiece(pieces []entry.Piece, pc entry.Piece) []entry.Piece {
	out := make([]entry.Piece, 0, len(pieces)+2)
	placed := false
	for _, old := range pieces {
		if old.End < pc.Start {
			out = append(out, old)
			continue
		}
		if old.Start > pc.End {
			if !placed {
				out, placed = append(out, pc), true
			}
			out = append(out, old)
			continue
		}
		if old.Start < pc.Start {
			left := old
			left.End = pc.Start - 1
			out = append(out, left)
		}
		if !placed {
			out, placed = append(out, pc), true
		}
		if old.End > pc.End {
			right := old
			right.Start = pc.End + 1
			right.Offset = old.Offset + right.Start - old.Start
			out = append(out, right)
		}
	}
	if !placed {
		out = append(out, pc)
	}
	return out
}

// unusedFiles returns the ids of the files of old that no piece of kept
// refers to.
func unusedFiles(old, kept []entry.Piece) [][16]byte {
	var out [][16]byte
	for _, o := range old {
		used := slices.ContainsFunc(kept, func(k entry.Piece) bool { return k.File.ID == o.File.ID })
		if !used && !slices.Contains(out, o.File.ID) {
			out = append(out, o.File.ID)
		}
	}
	return out
}

// coversAll reports whether pieces hold every byte of [0, length).
func coversAll(pieces []entry.Piece, length int64) bool {
	next := int64(0)
	for _, pc := range pieces {
		if pc.Start != next {
			return false
		}
		next = pc.End + 1
	}
	return next == length
}

// keepPiece stores the piece ref (the bytes pd.Span, just committed to
// its file under pl.key) as keepPart stores an inline part: combined with
// the pieces stored under the key when they belong together, else in
// their place; never over a complete response; not at all when a purge
// overtook the fill. The files that no stored piece uses any longer are
// removed, the new one too when it was not stored. Once the pieces cover
// the representation, its complete response is built from them
// (completePieces).
func (p *Proxy) keepPiece(ctx context.Context, c *call, respH http.Header, pd httpcache.PartialDecision, ref entry.BodyFile,
	pl placement, watch *invalidate.Watch, reqTime, respTime time.Time) {
	h := storedHeader(respH, pd.Strip)
	delete(h, "Content-Range")
	pc := entry.Piece{Span: entry.Span{Start: pd.Span.Start, End: pd.Span.End}, File: ref}
	var (
		kept   bool
		unused [][16]byte
		whole  *entry.Entry
	)
	// The watch of a build begins before the entry it builds from is
	// stored: a purge after that store, before the build, is seen.
	bw := p.inval.Watch(c.host, c.tgt)
	_, maxObject := bodyLimits(c.cfg)
	p.parts.Lock()
	watch.Commit(httpcache.Tags(h), func() {
		pieces, header := []entry.Piece{pc}, h
		var old []entry.Piece
		var cur entry.Entry
		if _, err := p.store.Get(ctx, pl.key, &cur); err == nil {
			switch cur.Kind {
			case entry.KindResponse:
				return
			case entry.KindPartial:
				old = slices.Clone(cur.Partial.Pieces)
				v, _ := httpcache.StrongValidator(&cur)
				fresh, _ := httpcache.Evaluate(stored(&cur), httpcache.RequestCC{}, p.now())
				if len(old) > 0 && httpcache.CanCombine(v, cur.Partial.Length, fresh == httpcache.UseFresh, pd.Validator, pd.Length) {
					// More pieces than an entry holds give way to the
					// newest part alone.
					if merged := addPiece(old, pc); len(merged) <= entry.MaxPieces {
						pieces = merged
						header = httpcache.MergeNotModified(cur.HTTPHeader(), h)
					}
				}
			}
		}
		e := partEntry(c, header, pd, reqTime, respTime)
		e.Partial = &entry.Partial{Length: pd.Length, Pieces: pieces}
		if pl.marker != nil {
			p.set(ctx, c, c.prim, pl.marker)
		}
		// Never p.set: a lease holder's SetShared must not carry a part.
		if err := p.store.Set(ctx, pl.key, e); err != nil {
			p.log.Debug("partial response not stored", "key", pl.key, "err", err)
			return
		}
		kept, unused = true, unusedFiles(old, pieces)
		if coversAll(pieces, pd.Length) && pd.Length <= maxObject {
			if _, running := p.building[pl.key]; running {
				// One build per key: the running one builds again
				// from this entry once it is done.
				p.building[pl.key] = true
			} else {
				p.building[pl.key] = false
				whole = e
			}
		}
	})
	p.parts.Unlock()
	if !kept {
		bw.End()
		p.bodies.Remove(ref.ID)
		return
	}
	for _, id := range unused {
		p.bodies.Remove(id)
	}
	if whole == nil {
		bw.End()
		return
	}
	p.completePieces(c, pl.key, whole, bw)
}

// maxBuilds bounds the builds one completePieces goroutine makes of a
// key's complete response: a part stored during a build makes it build
// again from the entry that part left, at most this many times in all.
const maxBuilds = 3

// completePieces builds the complete response of the partial response e,
// stored under key, whose pieces cover its representation, on a
// goroutine of the Proxy (Close stops it and waits for it): the pieces'
// bytes in order into a new body file (CRC-32C as for every body), then a
// complete entry (KindResponse with that file) in place of e, stored and
// shared as any file-backed fill's, and the piece files removed. The
// client whose part completed the pieces has its response already; until
// the complete response is stored, requests are served from the pieces,
// never from a half-built file (it is renamed into place when whole). It
// stores nothing when e is no longer what the key holds (a newer part, a
// purge, a soft purge: watch, begun before e was stored, sees those) or
// a piece cannot be read. One build per key runs at a time (p.building):
// a part stored meanwhile does not start another full copy, it makes this
// one build again from what that part left (at most maxBuilds builds).
func (p *Proxy) completePieces(c *call, key string, e *entry.Entry, watch *invalidate.Watch) {
	cc := &call{cfg: c.cfg, rule: c.rule, host: c.host, tgt: c.tgt, prim: c.prim, key: key}
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		for n := 1; ; n++ {
			if p.beforeBuild != nil {
				p.beforeBuild(key)
			}
			err := p.buildComplete(p.ctx, cc, key, e, watch)
			watch.End()
			if err == nil {
				p.endBuild(key)
				return
			}
			p.log.Debug("partial response not completed", "key", key, "err", err)
			if e, watch = p.nextBuild(cc, key, n); e == nil {
				return
			}
		}
	}()
}

// endBuild records that no build of key's complete response runs.
func (p *Proxy) endBuild(key string) {
	p.parts.Lock()
	delete(p.building, key)
	p.parts.Unlock()
}

// nextBuild returns what the build of key's complete response, which
// failed at its n-th try, builds from next, with its watch: the partial
// response a part stored meanwhile left, when its pieces still cover the
// representation. nil (and no build runs any longer) when no part was
// stored meanwhile, after maxBuilds tries, or once the Proxy closes.
func (p *Proxy) nextBuild(c *call, key string, n int) (*entry.Entry, *invalidate.Watch) {
	watch := p.inval.Watch(c.host, c.tgt)
	p.parts.Lock()
	defer p.parts.Unlock()
	var cur entry.Entry
	if p.building[key] && n < maxBuilds && p.ctx.Err() == nil {
		if _, err := p.store.Get(p.ctx, key, &cur); err == nil && pieced(&cur) && coversAll(cur.Partial.Pieces, cur.Partial.Length) {
			p.building[key] = false
			return detach(&cur), watch
		}
	}
	delete(p.building, key)
	watch.End()
	return nil, nil
}

func (p *Proxy) buildComplete(ctx context.Context, c *call, key string, e *entry.Entry, watch *invalidate.Watch) error {
	length := e.Partial.Length
	segs, _, err := p.openPieces(key, e, httpcache.ByteRange{Start: 0, End: length - 1})
	if err != nil {
		return err
	}
	defer segs.close()
	bw, err := p.bodies.Create(key, length)
	if err != nil {
		return err
	}
	defer bw.Abort() // a no-op once committed
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	for _, s := range segs {
		src := &ctxReader{ctx: ctx, r: s.body.Section(s.off, spanLen(s.span))}
		if _, err := io.CopyBuffer(bw, src, *bp); err != nil {
			return err
		}
	}
	whole := *e
	whole.Kind, whole.Partial, whole.Body = entry.KindResponse, nil, nil
	assembled(&whole, length)
	ref, err := bw.Commit(func(ref entry.BodyFile) []byte {
		m := whole
		m.File = &ref
		return entry.Encode(nil, &m)
	})
	if err != nil {
		return err
	}
	whole.File = &ref
	stored := false
	p.parts.Lock()
	watch.Commit(whole.Tags, func() {
		var cur entry.Entry
		if _, err := p.store.Get(ctx, key, &cur); err != nil || cur.Kind != entry.KindPartial ||
			!slices.Equal(cur.Partial.Pieces, e.Partial.Pieces) {
			return
		}
		if err := p.store.Set(ctx, key, &whole); err != nil {
			return
		}
		stored = true
	})
	p.parts.Unlock()
	if !stored {
		p.bodies.Remove(ref.ID)
		return errors.New("the partial response changed while its complete body was built")
	}
	p.shareBody(c, key, &whole)
	for _, id := range unusedFiles(e.Partial.Pieces, nil) {
		p.bodies.Remove(id)
	}
	return nil
}

// ctxReader stops a copy once ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r *ctxReader) Read(b []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(b)
}
