package l2

import (
	"encoding/binary"
	"errors"

	"github.com/tiercache/tiercache/internal/entry"
)

// Stored value layout: our own small wrapper around the entry codec.
//
//	magic "TCL2" (4 bytes; a new layout takes a new magic)
//	uvarint length, then the tier's key prefix
//	uvarint length, then the cache key
//	entry.Encode bytes (versioned and checksummed by package entry)
//
// Prefix and key make a value self-describing: a read checks both against
// the tier and key it asked for, so a value written by another tier (even
// for the same cache key), planted, or under a SHA-256 collision is a miss;
// and Hottest and PurgeMatching recover the cache key, which the Redis key
// name only holds hashed. Lengths must be minimal uvarints, so a value is
// accepted only in exactly the form wrap writes.
const valueMagic = "TCL2"

// maxField rejects absurd prefix and key lengths before slicing; cache keys
// are URLs plus a few header values.
const maxField = 1 << 20

var (
	errNotValue = errors.New("l2: not a tiercache value")
	errTrunc    = errors.New("l2: truncated value")
	errIdentity = errors.New("l2: value of another tier or key")
)

// wrap encodes a tier's entry e for key as a stored value, in one
// allocation.
func wrap(prefix, key string, e *entry.Entry) []byte {
	n := len(valueMagic) + uvarintLen(uint64(len(prefix))) + len(prefix) +
		uvarintLen(uint64(len(key))) + len(key) + entry.EncodedSize(e)
	b := make([]byte, 0, n)
	b = append(b, valueMagic...)
	b = binary.AppendUvarint(b, uint64(len(prefix)))
	b = append(b, prefix...)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	return entry.Encode(b, e)
}

// split checks the wrapper of a stored value and that it belongs to the
// tier of prefix, and returns the cache key and the entry bytes, both
// aliasing b. It never panics.
func split(b []byte, prefix string) (key, enc []byte, err error) {
	if len(b) < len(valueMagic) || string(b[:len(valueMagic)]) != valueMagic {
		return nil, nil, errNotValue
	}
	p, rest, ok := field(b[len(valueMagic):])
	if !ok {
		return nil, nil, errTrunc
	}
	if string(p) != prefix {
		return nil, nil, errIdentity
	}
	key, enc, ok = field(rest)
	if !ok {
		return nil, nil, errTrunc
	}
	return key, enc, nil
}

// field reads a uvarint length and that many bytes from b.
func field(b []byte) (f, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	// w != uvarintLen(n): an overlong length, not our encoding.
	if w <= 0 || w != uvarintLen(n) || n > maxField || n > uint64(len(b)-w) {
		return nil, nil, false
	}
	end := w + int(n)
	return b[w:end], b[end:], true
}

// unwrap parses a stored value of the tier of prefix into its cache key (a
// copy) and e, whose strings and body alias b.
func unwrap(b []byte, prefix string, e *entry.Entry) (key string, err error) {
	k, enc, err := split(b, prefix)
	if err != nil {
		return "", err
	}
	if err := entry.Decode(enc, e); err != nil {
		return "", err
	}
	return string(k), nil
}

// unwrapFor is unwrap for a read of key: a value that holds another key is
// an error, found before the entry's checksum is computed.
func unwrapFor(b []byte, prefix, key string, e *entry.Entry) error {
	k, enc, err := split(b, prefix)
	if err != nil {
		return err
	}
	if string(k) != key {
		return errIdentity
	}
	return entry.Decode(enc, e)
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
