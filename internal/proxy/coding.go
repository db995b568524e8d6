package proxy

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
)

// Content codings under a tier that normalizes Accept-Encoding
// (defaults.contentCoding, docs/caching.md#content-codings): fills ask
// the origin with the tier's list, so one copy per URL is stored; at
// store time the body is checked to decode within a bound (or compressed,
// for an identity body of a listed type); each client then gets it as
// stored when it accepts the stored coding, decoded when it does not
// (coded.go serves it).

// minDecodeLimit is the least bound on a stored body's decoded length,
// and maxDecodeRatio how far past its stored length a body may inflate
// above that: a body that inflates past max(64 MiB, min(the largest body
// the tier stores, 64 times its own length)) is not decoded for anyone.
// So a decompression bomb is stopped within 64 MiB of decoding (a
// fraction of a second), whatever the tier stores, and its decoding never
// holds more than a buffer in memory; text and JSON inflate 3 to 20
// times.
const (
	minDecodeLimit = 64 << 20
	maxDecodeRatio = 64
)

// zstdMaxWindow bounds the memory of a zstd decoder: RFC 8878 §3.1.1.1.2
// tells HTTP encoders to keep the window within 8 MiB.
const zstdMaxWindow = 8 << 20

// codecs keeps decoders and the gzip writer for reuse: a decoded hit
// costs no decoder state of its own.
type codecs struct {
	gz, br, zs, gzw sync.Pool
}

// errCoding: the stored body cannot be decoded with its coding.
var errCoding = errors.New("proxy: content coding not decodable")

// decoder is a reader of src's decoded bytes; release hands it back.
type decoder struct {
	io.Reader
	release func()
}

// open returns a decoder of src for c (gzip, br or zstd).
func (cs *codecs) open(c httpcache.Coding, src io.Reader) (decoder, error) {
	switch c {
	case httpcache.CodingGzip:
		zr, _ := cs.gz.Get().(*gzip.Reader)
		var err error
		if zr == nil {
			zr, err = gzip.NewReader(src)
		} else {
			err = zr.Reset(src)
		}
		if err != nil {
			return decoder{}, err
		}
		return decoder{zr, func() { cs.gz.Put(zr) }}, nil
	case httpcache.CodingBr:
		br, _ := cs.br.Get().(*brotli.Reader)
		if br == nil {
			br = brotli.NewReader(src)
		} else if err := br.Reset(src); err != nil {
			return decoder{}, err
		}
		return decoder{br, func() { cs.br.Put(br) }}, nil
	case httpcache.CodingZstd:
		zd, _ := cs.zs.Get().(*zstd.Decoder)
		var err error
		if zd == nil {
			// One goroutine-free stream decoder with bounded memory.
			zd, err = zstd.NewReader(src, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
				zstd.WithDecoderMaxWindow(zstdMaxWindow))
		} else {
			err = zd.Reset(src)
		}
		if err != nil {
			return decoder{}, err
		}
		return decoder{zd, func() { _ = zd.Reset(nil); cs.zs.Put(zd) }}, nil
	}
	return decoder{}, errCoding
}

// decodedSize decodes src as c into nothing, in a buffer's worth of
// memory, and returns its decoded length; ok is false when src does not
// decode to its end (a coding the origin lied about, a truncated body,
// trailing garbage) or decodes past its bound (past(n) reports n bytes
// decoded too many).
func (cs *codecs) decodedSize(c httpcache.Coding, src io.Reader, past func(n int64) bool, buf []byte) (n int64, ok bool) {
	d, err := cs.open(c, src)
	if err != nil {
		return -1, false
	}
	defer d.release()
	for {
		k, err := d.Read(buf)
		n += int64(k)
		if past(n) {
			return -1, false
		}
		if err == io.EOF {
			return n, true
		}
		if err != nil {
			return -1, false
		}
	}
}

// gzipBody compresses b (gzip, the fastest level: nginx's gzip_comp_level
// 1 is its default for the same reason) into a new slice.
func (cs *codecs) gzipBody(b []byte) []byte {
	var out bytes.Buffer
	out.Grow(len(b)/3 + 64)
	zw, _ := cs.gzw.Get().(*gzip.Writer)
	if zw == nil {
		zw, _ = gzip.NewWriterLevel(&out, gzip.BestSpeed)
	} else {
		zw.Reset(&out)
	}
	_, _ = zw.Write(b)
	_ = zw.Close()
	cs.gzw.Put(zw)
	return out.Bytes()
}

// decodeLimit is the bound on the decoded length of a fill's body of size
// bytes.
func (f *fetch) decodeLimit(size int64) int64 { return decodeBound(f.storeMax, size) }

func decodeBound(storeMax, size int64) int64 {
	limit := storeMax
	if size <= limit/maxDecodeRatio {
		limit = size * maxDecodeRatio
	}
	return max(limit, minDecodeLimit)
}

// codedHeader makes h, a header from a fill under a normalizing tier (to
// store, or to send), say Vary: Accept-Encoding, merged with the origin's
// Vary: every answer from one stored copy depends on the client's
// Accept-Encoding.
func codedHeader(h map[string][]string) {
	if v, added := httpcache.VaryWith(h["Vary"], "Accept-Encoding"); added {
		h["Vary"] = []string{v}
	}
}

// storedCoding is the coding of e's stored body: gzip for a body the cache
// compressed, else its Content-Encoding.
func storedCoding(e *entry.Entry) (httpcache.Coding, string) {
	if e.Flags&entry.FlagCompressed != 0 {
		return httpcache.CodingGzip, "gzip"
	}
	c, name, n := httpcache.CodingIdentity, "", 0
	for i := range e.Header {
		if f := &e.Header[i]; f.Name == "Content-Encoding" {
			c, name = httpcache.CodingOfValue(f.Value), f.Value
			n++
		}
	}
	if n > 1 {
		return httpcache.CodingOther, name
	}
	return c, name
}

// decodable reports a coding the cache can decode.
func decodable(c httpcache.Coding) bool {
	return c == httpcache.CodingGzip || c == httpcache.CodingBr || c == httpcache.CodingZstd
}

// noTransform reports Cache-Control: no-transform on a response: a proxy
// must not change its content coding (RFC 9111 §5.2.2.6).
func noTransform(cc []string) bool {
	for _, v := range cc {
		if strings.Contains(strings.ToLower(v), "no-transform") {
			return true
		}
	}
	return false
}

// codeBody checks (or compresses) the inline body of e, a coded entry:
// an identity body is its own decoded size, and is stored gzip-compressed
// when the tier compresses its type and size and that makes it smaller;
// a body in a coding the cache knows must decode to its end within limit,
// else (and for a coding it does not know, or a response that forbids
// transforming it) e is served only as stored (FlagUndecodable).
func (p *Proxy) codeBody(cc compressPolicy, e *entry.Entry, limit int64) {
	c, _ := storedCoding(e)
	transformable := !noTransform(e.Values("Cache-Control"))
	switch {
	case c == httpcache.CodingIdentity:
		e.DecodedSize = int64(len(e.Body))
		if transformable && e.Status == 200 && cc.compresses(e) {
			if z := p.codecs.gzipBody(e.Body); len(z) < len(e.Body) {
				e.Body = z
				e.Flags |= entry.FlagCompressed
			}
		}
		return
	case decodable(c) && transformable:
		bp := p.bufs.Get().(*[]byte)
		n, ok := p.codecs.decodedSize(c, bytes.NewReader(e.Body), func(n int64) bool { return n > limit }, *bp)
		p.bufs.Put(bp)
		if ok {
			e.DecodedSize = n
			return
		}
	}
	e.Flags |= entry.FlagUndecodable
	e.DecodedSize = -1
}

// compressPolicy is what store-time compression asks of a response.
type compressPolicy struct {
	on      bool
	minSize int64
	types   interface{ Compressible(string) bool }
}

func (cc compressPolicy) compresses(e *entry.Entry) bool {
	return cc.on && int64(len(e.Body)) >= cc.minSize && cc.types.Compressible(e.Get("Content-Type")) &&
		e.Get("Content-Range") == ""
}

// compressPolicyOf is c's tier's store-time compression.
func compressPolicyOf(c *call) compressPolicy {
	cc := &c.cfg.Coding
	return compressPolicy{on: cc.Compress, minSize: cc.MinSize, types: cc}
}

// codingCheck decodes a body as a fill writes it into its body file, on a
// goroutine of its own (it owns it: finish or abort ends it), through a
// pipe: so a large body is checked in a buffer's worth of memory while it
// arrives, and a bomb stops the check, not the fill.
type codingCheck struct {
	pw   *io.PipeWriter
	done chan struct{}
	fed  atomic.Int64 // the coded bytes written so far
	size int64
	ok   bool
}

// errCheckEnded: the check stopped reading (it decided).
var errCheckEnded = errors.New("proxy: coding check ended")

// startCheck checks a body of coding c as it is written, against the
// bound of a fill that stores up to storeMax bytes: the bound follows the
// coded bytes written so far, so that a bomb of unknown length is stopped
// as early as one whose length was announced.
func (p *Proxy) startCheck(c httpcache.Coding, storeMax int64) *codingCheck {
	pr, pw := io.Pipe()
	ck := &codingCheck{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(ck.done)
		buf := make([]byte, 32<<10)
		past := func(n int64) bool { return n > decodeBound(storeMax, ck.fed.Load()) }
		ck.size, ck.ok = p.codecs.decodedSize(c, pr, past, buf)
		pr.CloseWithError(errCheckEnded)
	}()
	return ck
}

// write hands b to the check; once the check has decided it returns at
// once.
func (ck *codingCheck) write(b []byte) {
	if ck != nil && len(b) > 0 {
		ck.fed.Add(int64(len(b)))
		_, _ = ck.pw.Write(b)
	}
}

// finish ends the body and waits for the check's verdict.
func (ck *codingCheck) finish() (int64, bool) {
	_ = ck.pw.Close()
	<-ck.done
	return ck.size, ck.ok
}

// abort ends the check, whatever it decided (a no-op after finish).
func (ck *codingCheck) abort() {
	if ck == nil {
		return
	}
	_ = ck.pw.CloseWithError(errCheckEnded)
	<-ck.done
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	return k, err
}

// errInflated: a body decoded on its way to a client inflated past the
// bound (decodeBound): it is broken off.
var errInflated = errors.New("proxy: decoded body inflated past its bound")

// boundedDecode is a decoder held to the bound a stored body is checked
// against, for a response relayed decoded without being stored.
type boundedDecode struct {
	d        io.Reader
	coded    *countingReader
	storeMax int64
	n        int64
}

func (b *boundedDecode) Read(p []byte) (int, error) {
	k, err := b.d.Read(p)
	b.n += int64(k)
	if b.n > decodeBound(b.storeMax, b.coded.n) {
		return k, errInflated
	}
	return k, err
}
