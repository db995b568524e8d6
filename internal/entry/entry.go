// Package entry owns the stored form of a cached response: the Entry model
// and its versioned, checksummed binary codec. Every layer (L1 bigcache, L2
// Redis) stores exactly these bytes, so an entry written by one sidecar can
// be read by any other, and a corrupt or foreign value is detected rather
// than served.
//
// The package imports only internal/httpcache, the one home of age
// arithmetic (RFC 9111 §4.2.3), which imports nothing of ours. Decoding is on the cache-hit path, so
// Decode allocates as little as it can: strings and the body alias the input
// buffer instead of being copied.
package entry

import (
	"maps"
	"net/http"
	"net/textproto"
	"slices"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

// Kind says what an entry stored under a primary key is.
type Kind uint8

const (
	// KindResponse is a complete stored response.
	KindResponse Kind = 1
	// KindVary is a marker stored under a primary key whose response
	// varies: it lists the selecting header names and a nonce that every
	// variant's key includes. Writing a new marker (new nonce) orphans all
	// older variants at once, which is how a purge or a change of Vary on
	// the origin retires them.
	KindVary Kind = 2
	// KindUncacheable remembers for a short time that the origin answered
	// this key with something that cannot be stored (Varnish's
	// "hit-for-miss"), so later requests go straight to the origin instead
	// of queueing behind one another in a collapsed fetch.
	KindUncacheable Kind = 3
	// KindPartial is a stored partial response (RFC 9111 §3.3): some byte
	// spans of one representation, kept from 206 responses under the key
	// its complete response would have. Entry.Partial says which spans
	// Body holds; Status and Header are those of the complete response
	// (200, without Content-Range and Content-Length). It is a kind of
	// its own so that every path that knows only complete responses
	// (KindResponse) takes it for a miss.
	KindPartial Kind = 4
)

// Flag bits carried by an entry.
type Flag uint16

const (
	// FlagMustRevalidate: must-revalidate, proxy-revalidate or s-maxage was
	// present; a stale entry is never served (no stale-while-revalidate,
	// no stale-if-error, no client max-stale).
	FlagMustRevalidate Flag = 1 << iota
	// FlagNoCache: unqualified no-cache; stored, but validated with the
	// origin before every use.
	FlagNoCache
	// FlagCoded (KindResponse): stored under a tier that normalizes
	// Accept-Encoding: the origin was asked with the tier's list, not the
	// client's, and every client gets the response as stored (when it
	// accepts the stored coding) or decoded (DecodedSize). Such an entry
	// encodes as version 5 or 6.
	FlagCoded
	// FlagUndecodable (with FlagCoded): the body did not decode (a coding
	// the cache does not know, one the origin lied about, or one that
	// inflates past the bound) or must not be transformed (no-transform):
	// it is served only as stored, to clients that accept its coding.
	FlagUndecodable
	// FlagCompressed (with FlagCoded): the origin sent identity and the
	// cache stored it gzip-compressed. Header is the origin's (its ETag
	// is the identity representation's); Body is the gzip bytes.
	FlagCompressed
)

// Field is one stored header field line. Name is in canonical form
// (textproto.CanonicalMIMEHeaderKey).
type Field struct {
	Name  string
	Value string
}

// Entry is one stored object. For KindVary and KindUncacheable only the
// identity fields, Vary/Nonce (KindVary) and the times matter.
type Entry struct {
	Kind  Kind
	Flags Flag

	// Identity, as keyed. Scans that purge by prefix, URL or tag match on
	// these without needing the key.
	Host   string   // lowercase host[:port]
	Target string   // path?query after the tier's key shaping
	Tags   []string // from Surrogate-Key / Cache-Tag, deduplicated

	// KindVary only: lowercase selecting header names, sorted, and the
	// nonce that the keys of this marker's variants include.
	Vary  []string
	Nonce uint64

	Status int
	Header []Field // end-to-end header fields, in the origin's order
	Body   []byte  // the body inline; empty when File is set; the spans' bytes back to back when Partial has Spans; empty when it has Pieces

	// File, when set, says the body is not inline but in the body store
	// (package bodystore): a file named by File.ID, and, when File.Chunks
	// > 0, in L2 chunks. Such an entry encodes as version 2 and Body is
	// not encoded. nil means the body is Body (version 1, as before).
	File *BodyFile

	// Partial is set exactly when Kind is KindPartial: the complete
	// length of the representation and either the spans of it that Body
	// holds, in order (version 3, the body inline), or the pieces of it
	// that body files hold (version 4, Body empty). File is nil. nil for
	// every other kind.
	Partial *Partial

	// RFC 9111 §4.2.3 inputs, fixed when the entry was stored or last
	// revalidated.
	RequestTime  time.Time     // when the request that produced it was sent
	ResponseTime time.Time     // when the response was received
	InitialAge   time.Duration // corrected_initial_age
	Lifetime     time.Duration // freshness lifetime

	// Stale windows after the freshness lifetime ends (RFC 5861), already
	// combining the origin's directives with the tier's defaults.
	StaleWhileRevalidate time.Duration
	StaleIfError         time.Duration
	// StaleIfUnreachable (KindResponse only) is how long past its
	// freshness the response may stand in for an origin that cannot be
	// reached (RFC 9111 §4.2.4): the tier's setting when it was stored, 0
	// when a directive forbids stale use.
	StaleIfUnreachable time.Duration

	// DecodedSize (FlagCoded only) is the length of the body once its
	// content coding is removed: the body's own length for identity, -1
	// when unknown (FlagUndecodable).
	DecodedSize int64
}

// BodyFile is the reference from an entry to a body kept outside it.
type BodyFile struct {
	// ID names the body: random, never reused, so a file or chunk of a
	// replaced or purged body is never mistaken for the current one.
	ID [16]byte
	// Size is the body's length in bytes.
	Size int64
	// CRC is the CRC-32C (Castagnoli) of the body.
	CRC uint32
	// Chunks is the number of L2 chunks holding the body; 0 means the
	// body is not in L2 (it is local to the replica that fetched it).
	Chunks uint32
}

// Partial describes what a KindPartial entry holds of a representation:
// Spans (inline, version 3) or Pieces (in body files, version 4), never
// both.
type Partial struct {
	// Length is the representation's complete length in bytes (from the
	// Content-Range of the 206 responses), at least 1.
	Length int64
	// Spans are the byte ranges held, sorted, disjoint and not adjacent
	// (adjacent spans are one span), within [0, Length). Body is their
	// bytes back to back, so len(Body) is the sum of their lengths.
	Spans []Span
	// Pieces are the byte ranges held in body files, sorted and disjoint
	// (adjacent pieces stay apart: each has its own file), within [0,
	// Length), at most MaxPieces of them. Two pieces may share a file (an
	// older piece split by a newer one inside it).
	Pieces []Piece
}

// MaxPieces bounds the pieces of one partial entry (version 4): a part
// that would make more gives way to the newest part alone, as inline
// parts give way when they outgrow an entry. 256 lets a player that reads
// a representation in sequential ranges (1 MiB each, say) keep hundreds
// of them until they cover it and become one complete file; an entry of
// 256 pieces of 1 MiB encodes in about 10 KiB (its header fields besides).
const MaxPieces = 256

// Piece is a span of a representation kept in a body file: the bytes
// [Start, End] of the representation are the file's body bytes from
// Offset on.
type Piece struct {
	Span
	// File is the body file (its Chunks is 0: pieces stay in the L1 of
	// the replica that received them).
	File BodyFile
	// Offset is where in the file's body the byte Start is.
	Offset int64
}

// Span is the byte range [Start, End] of a representation (inclusive, as
// in Content-Range).
type Span struct{ Start, End int64 }

// Len is the number of bytes in s.
func (s Span) Len() int64 { return s.End - s.Start + 1 }

// RefersTo reports whether e's body, or one of its pieces, is the body
// file id.
func (e *Entry) RefersTo(id [16]byte) bool {
	if e.File != nil && e.File.ID == id {
		return true
	}
	if e.Partial != nil {
		for i := range e.Partial.Pieces {
			if e.Partial.Pieces[i].File.ID == id {
				return true
			}
		}
	}
	return false
}

// Has reports whether f is set.
func (e *Entry) Has(f Flag) bool { return e.Flags&f != 0 }

// Get returns the first value of the named header field, or "".
func (e *Entry) Get(name string) string {
	name = textproto.CanonicalMIMEHeaderKey(name)
	for i := range e.Header {
		if e.Header[i].Name == name {
			return e.Header[i].Value
		}
	}
	return ""
}

// Values returns every value of the named header field in order. It
// allocates only when the field is present.
func (e *Entry) Values(name string) []string {
	name = textproto.CanonicalMIMEHeaderKey(name)
	var out []string
	for i := range e.Header {
		if e.Header[i].Name == name {
			out = append(out, e.Header[i].Value)
		}
	}
	return out
}

// HTTPHeader returns the stored fields as a new http.Header.
func (e *Entry) HTTPHeader() http.Header {
	h := make(http.Header, len(e.Header))
	for _, f := range e.Header {
		h[f.Name] = append(h[f.Name], f.Value)
	}
	return h
}

// FieldsFrom converts an http.Header to stored fields with canonical names.
// Order follows sorted names so that encoding the same header twice gives
// the same bytes.
func FieldsFrom(h http.Header) []Field {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	out := make([]Field, 0, n)
	for _, name := range sortedKeys(h) {
		cname := textproto.CanonicalMIMEHeaderKey(name)
		for _, v := range h[name] {
			out = append(out, Field{Name: cname, Value: v})
		}
	}
	return out
}

// StaleDeadline is the last instant at which any stale use of the entry
// could still be allowed: the end of freshness plus the longest stale
// window (stale-while-revalidate, stale-if-error, stale-if-unreachable).
// Stores use it to expire entries; it never makes an entry fresh.
func (e *Entry) StaleDeadline() time.Time {
	w := max(e.StaleWhileRevalidate, e.StaleIfError, e.StaleIfUnreachable)
	return e.FreshUntil().Add(w)
}

// FreshUntil is the instant the entry stops being fresh:
// response_time + (lifetime - corrected_initial_age) (httpcache.FreshUntil).
func (e *Entry) FreshUntil() time.Time {
	return httpcache.FreshUntil(e.ResponseTime, e.Lifetime, e.InitialAge)
}

func sortedKeys(h http.Header) []string {
	return slices.Sorted(maps.Keys(h))
}
