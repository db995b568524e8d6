package httpcache

import "strings"

// Content codings (RFC 9110 §8.4.1) as the cache reads a response's
// Content-Encoding and a request's Accept-Encoding (§12.5.3).

// Coding is a content coding the cache can tell apart.
type Coding uint8

const (
	// CodingIdentity: no Content-Encoding (or "identity").
	CodingIdentity Coding = iota
	// CodingGzip: gzip (or its alias x-gzip).
	CodingGzip
	// CodingBr: Brotli (RFC 7932).
	CodingBr
	// CodingZstd: Zstandard (RFC 8878).
	CodingZstd
	// CodingOther: any other coding, or several applied in turn: the
	// cache cannot decode it and serves it only to clients that name it.
	CodingOther
)

// Token is the coding's name in Content-Encoding and Accept-Encoding
// ("" for CodingOther).
func (c Coding) Token() string {
	switch c {
	case CodingIdentity:
		return "identity"
	case CodingGzip:
		return "gzip"
	case CodingBr:
		return "br"
	case CodingZstd:
		return "zstd"
	}
	return ""
}

// CodingOf reads the value of a response's Content-Encoding field (all
// its lines joined, or the one line). Empty, "identity" or only
// "identity" tokens are CodingIdentity; one known coding is itself; any
// other value, several codings among them, is CodingOther.
func CodingOf(contentEncoding []string) Coding {
	got := CodingIdentity
	for _, line := range contentEncoding {
		for rest := line; rest != ""; {
			var tok string
			tok, rest, _ = strings.Cut(rest, ",")
			tok = trimOWS(tok)
			var c Coding
			switch {
			case tok == "" || strings.EqualFold(tok, "identity"):
				continue
			case strings.EqualFold(tok, "gzip") || strings.EqualFold(tok, "x-gzip"):
				c = CodingGzip
			case strings.EqualFold(tok, "br"):
				c = CodingBr
			case strings.EqualFold(tok, "zstd"):
				c = CodingZstd
			default:
				return CodingOther
			}
			if got != CodingIdentity {
				return CodingOther // two codings, one over the other
			}
			got = c
		}
	}
	return got
}

// CodingOfValue is CodingOf of one field line, without allocating.
func CodingOfValue(v string) Coding {
	switch t := trimOWS(v); {
	case t == "" || strings.EqualFold(t, "identity"):
		return CodingIdentity
	case strings.EqualFold(t, "gzip") || strings.EqualFold(t, "x-gzip"):
		return CodingGzip
	case strings.EqualFold(t, "br"):
		return CodingBr
	case strings.EqualFold(t, "zstd"):
		return CodingZstd
	case !strings.Contains(t, ","):
		return CodingOther
	}
	return CodingOf([]string{v})
}

// Acceptable reports whether a client whose request header is req accepts
// a representation with content coding c (name: the Content-Encoding
// value, consulted for CodingOther), as RFC 9110 §12.5.3 reads
// Accept-Encoding: a coding is acceptable when listed with a non-zero
// q-value, or when not listed and "*" is listed with a non-zero q-value;
// identity is acceptable unless excluded by "identity;q=0", or by "*;q=0"
// without an entry for identity.
//
// One choice where the RFC leaves it open: a request without
// Accept-Encoding accepts identity only. The RFC lets a server send any
// coding then, but adds that the client may not be able to decode it, and
// the clients that send none (curl, scripts, health checks) mostly cannot;
// nginx and Varnish send them identity too. An empty Accept-Encoding
// accepts identity only, as the RFC says. It does not allocate.
func Acceptable(req Header, c Coding, name string) bool {
	lines := req.Values("Accept-Encoding")
	if len(lines) == 0 {
		return c == CodingIdentity
	}
	want := c.Token()
	if c == CodingOther {
		want = trimOWS(name)
	}
	listed, star := qAbsent, qAbsent
	for _, line := range lines {
		for rest := line; rest != ""; {
			var item string
			item, rest, _ = strings.Cut(rest, ",")
			tok, q := codingItem(item)
			switch {
			case tok == "":
			case tok == "*":
				star = q
			case want != "" && (strings.EqualFold(tok, want) || c == CodingGzip && strings.EqualFold(tok, "x-gzip")):
				listed = max(listed, q)
			}
		}
	}
	if c == CodingIdentity {
		switch {
		case listed != qAbsent:
			return listed > 0
		case star != qAbsent:
			return star > 0
		}
		return true
	}
	if listed != qAbsent {
		return listed > 0
	}
	return star > 0
}

// qAbsent marks a coding not named at all; q-values are kept in
// thousandths (0..1000).
const qAbsent = -1

// codingItem reads one Accept-Encoding member: its coding token and its
// q-value in thousandths (1000 when absent; 0 for a malformed weight, so
// that a weight the cache cannot read never makes a coding acceptable).
func codingItem(item string) (string, int) {
	tok, params, _ := strings.Cut(item, ";")
	tok = trimOWS(tok)
	q := 1000
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		k, v, ok := strings.Cut(trimOWS(p), "=")
		if !ok || !strings.EqualFold(trimOWS(k), "q") {
			continue
		}
		q = parseQ(trimOWS(v))
	}
	return tok, q
}

// parseQ reads a weight (RFC 9110 §12.4.2: "0", "0.5", "1", "1.000") in
// thousandths; anything else reads as 0.
func parseQ(v string) int {
	if v == "" || v[0] != '0' && v[0] != '1' {
		return 0
	}
	n := int(v[0]-'0') * 1000
	if len(v) == 1 {
		return n
	}
	if v[1] != '.' || len(v) > 5 {
		return 0
	}
	scale := 100
	for i := 2; i < len(v); i++ {
		d := v[i]
		if d < '0' || d > '9' {
			return 0
		}
		n += int(d-'0') * scale
		scale /= 10
	}
	if n > 1000 {
		return 0
	}
	return n
}

// DerivedETag is the entity tag of a representation that the cache made
// from one whose tag is etag by applying or removing a content coding
// (suffix names the result: "gzip", "identity"): `"abc"` becomes
// `"abc-gzip"`, `W/"abc"` becomes `W/"abc-gzip"`. A representation with
// another content coding is another representation and needs another tag
// (RFC 9110 §8.8.3); a weak tag stays weak. "" when etag is not a valid
// entity tag (the derived representation then has none).
func DerivedETag(etag, suffix string) string {
	t, ok := parseETag(etag)
	if !ok {
		return ""
	}
	out := `"` + t.opaque + "-" + suffix + `"`
	if t.weak {
		out = "W/" + out
	}
	return out
}

// VaryWith is the Vary field value that lists name besides what vary (the
// response's Vary lines) lists, and whether vary lacked it: names are
// compared without regard to case and are never repeated. "*" already
// covers every name.
func VaryWith(vary []string, name string) (string, bool) {
	for _, line := range vary {
		for rest := line; rest != ""; {
			var tok string
			tok, rest, _ = strings.Cut(rest, ",")
			if tok = trimOWS(tok); tok == "*" || strings.EqualFold(tok, name) {
				return strings.Join(vary, ", "), false
			}
		}
	}
	kept := make([]string, 0, len(vary)+1)
	for _, line := range vary {
		if line = trimOWS(line); line != "" {
			kept = append(kept, line)
		}
	}
	return strings.Join(append(kept, name), ", "), true
}
