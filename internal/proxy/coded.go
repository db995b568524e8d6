package proxy

import (
	"bytes"
	"io"
	"net/http"
	"strconv"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/metrics"
)

// Serving a coded entry (entry.FlagCoded: stored under a tier that
// normalizes Accept-Encoding) to one client, as its Accept-Encoding says
// (httpcache.Acceptable): as stored, decoded on the fly, passed to the
// origin, or refused (docs/caching.md#content-codings).

// codedHow is how a coded entry reaches one client.
type codedHow uint8

const (
	// asStored: the client accepts the stored coding (identity included).
	asStored codedHow = iota
	// decoded: it does not, but takes identity, and the body decodes.
	decoded
	// passed: it takes identity, but the body cannot be decoded for it
	// (FlagUndecodable): the request goes to the origin uncached, with the
	// client's own Accept-Encoding.
	passed
	// refused: it takes neither the stored coding nor identity: 406 Not
	// Acceptable (RFC 9110 §12.5.3 allows it).
	refused
)

// codedPlan is how the coded entry e reaches the client of r.
func codedPlan(r *http.Request, e *entry.Entry) codedHow {
	c, name := storedCoding(e)
	switch {
	case httpcache.Acceptable(r.Header, c, name):
		return asStored
	case !httpcache.Acceptable(r.Header, httpcache.CodingIdentity, ""):
		return refused
	case e.Flags&entry.FlagUndecodable != 0 || !decodable(c) || e.DecodedSize < 0:
		return passed
	}
	return decoded
}

// rewriteCoded makes h, the stored header of the coded entry e, the
// header of the representation the client gets (how): a body the cache
// compressed, served so, says Content-Encoding: gzip and gets its own
// entity tag (the origin's with "-gzip"); a body the origin coded, served
// decoded, loses its Content-Encoding and gets its own tag (the origin's
// with "-identity"); a decoded body is served whole (Range is ignored),
// so it announces no ranges.
func rewriteCoded(h http.Header, s *headerScratch, e *entry.Entry, how codedHow) {
	compressed := e.Flags&entry.FlagCompressed != 0
	switch {
	case how == asStored && compressed:
		s.set(h, "Content-Encoding", "gzip")
		retag(h, s, "gzip")
	case how == decoded && !compressed:
		delete(h, "Content-Encoding")
		retag(h, s, "identity")
		delete(h, "Accept-Ranges")
	case how == decoded:
		delete(h, "Accept-Ranges")
	}
}

// retag gives the representation in h the tag derived from its own with
// suffix, or none when it has no valid one.
func retag(h http.Header, s *headerScratch, suffix string) {
	tags := h["Etag"]
	if len(tags) == 0 {
		return
	}
	if t := httpcache.DerivedETag(tags[0], suffix); t != "" {
		if s != nil {
			s.set(h, "Etag", t)
		} else {
			h["Etag"] = []string{t}
		}
		return
	}
	delete(h, "Etag")
}

// refuseCoding answers 406 to a client that accepts neither the stored
// coding nor identity.
func refuseCoding(w http.ResponseWriter, r *http.Request) sent {
	w.Header()["Vary"] = []string{"Accept-Encoding"}
	return errorAnswer(w, r, "no acceptable content coding: the cache holds this resource in a coding the request's Accept-Encoding refuses, and the request refuses identity", http.StatusNotAcceptable)
}

// passCoded sends r to the origin uncached, as it came, when the entry's
// body cannot be decoded for it.
func (p *Proxy) passCoded(w http.ResponseWriter, r *http.Request, v verdict) sent {
	out := p.pass(w, r, p.cfg.Load(), verdict{x: xMiss, rule: v.rule, fwd: fwdMiss, dbg: v.dbg}, metrics.ResultMiss)
	return out.sent
}

// serveDecoded writes the body of the coded entry e decoded, whose header
// (rewritten) is in w already: whole, with the decoded length, from the
// inline body or from its body file (file), streamed through a decoder in
// a buffer's worth of memory.
func (p *Proxy) serveDecoded(w http.ResponseWriter, r *http.Request, e *entry.Entry, file *bodystore.Body) sent {
	h := w.Header()
	status := e.Status
	if !bodyAllowed(status) {
		w.WriteHeader(status)
		return sent{status: status}
	}
	h["Content-Length"] = []string{strconv.FormatInt(e.DecodedSize, 10)}
	w.WriteHeader(status)
	if r.Method == http.MethodHead || e.DecodedSize == 0 {
		return sent{status: status}
	}
	var src io.Reader
	if e.File != nil {
		if file == nil {
			p.log.Error("file-backed entry decoded without its body file", "path", r.URL.Path)
			panic(http.ErrAbortHandler)
		}
		src = file.Section(0, e.File.Size)
	} else {
		src = bytes.NewReader(e.Body)
	}
	c, _ := storedCoding(e)
	d, err := p.codecs.open(c, src)
	if err != nil {
		p.log.Warn("a checked body did not decode", "path", r.URL.Path, "err", err)
		panic(http.ErrAbortHandler)
	}
	defer d.release()
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	buf := *bp
	var n int64
	left := e.DecodedSize
	for left > 0 {
		k, rerr := d.Read(buf[:min(int64(len(buf)), left)])
		if k > 0 {
			m, werr := w.Write(buf[:k])
			n += int64(m)
			left -= int64(k)
			if werr != nil {
				return sent{status: status, bytes: n} // the client left
			}
		}
		if rerr != nil && left > 0 {
			// Shorter than checked: never complete-looking.
			p.log.Warn("a checked body decoded short", "path", r.URL.Path, "err", rerr)
			panic(http.ErrAbortHandler)
		}
	}
	return sent{status: status, bytes: n}
}
