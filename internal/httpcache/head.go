package httpcache

import (
	"net/http"
	"slices"
)

// HeadEffect is what a response to a HEAD does to the stored GET response
// the HEAD request could have selected (RFC 9111 §4.3.5).
type HeadEffect uint8

const (
	// HeadLeaves: the answer says nothing about the stored response (it is
	// not a 200), which stays as it is.
	HeadLeaves HeadEffect = iota
	// HeadUpdates: the HEAD's header fields update the stored response as
	// a 304's do (§3.2, MergeNotModified).
	HeadUpdates
	// HeadInvalidates: the answer shows that the stored response is no
	// longer what a GET returns; it is removed.
	HeadInvalidates
)

// EffectOfHead applies RFC 9111 §4.3.5 to a HEAD answered with status
// and header head, for a stored GET response with status storedStatus,
// header stored (without Content-Length, as entries keep it) and a body
// of storedLen bytes.
//
// Only a 200 counts. It updates the stored response when every validator
// it carries (ETag, Last-Modified) has the stored value and its
// Content-Length, when present, is the stored body's length; otherwise
// it invalidates it. A validator the HEAD does not carry is not compared
// (§4.3.5 speaks of "received validator fields").
//
// Choices where the RFC is silent: validators compare as exact strings
// (after trimming white space), so a weak ETag matches only itself; a
// stored response whose status is not 200 is invalidated (the HEAD's
// fields describe a 200, and merging them into a 404 would make a
// response neither sent); so is one whose Vary names differ from the
// HEAD's (the stored variant's key was derived from the old names, which
// an update cannot change) or when the HEAD says Vary: *; and a
// Content-Length that is not one valid number is a mismatch.
func EffectOfHead(storedStatus int, stored Header, storedLen int64, status int, head Header) HeadEffect {
	if status != http.StatusOK {
		return HeadLeaves
	}
	if storedStatus != http.StatusOK {
		return HeadInvalidates
	}
	for _, name := range [...]string{"ETag", "Last-Modified"} {
		got := values(head, name)
		if len(got) == 0 {
			continue
		}
		if len(got) != 1 || trimOWS(got[0]) != first(stored, name) {
			return HeadInvalidates
		}
	}
	if cl := values(head, "Content-Length"); len(cl) > 0 {
		n, ok := parsePos(trimOWS(cl[0]))
		if len(cl) != 1 || !ok || n != storedLen {
			return HeadInvalidates
		}
	}
	headNames, headStar := VaryNames(head)
	storedNames, storedStar := VaryNames(stored)
	if headStar || storedStar || !slices.Equal(headNames, storedNames) {
		return HeadInvalidates
	}
	return HeadUpdates
}
