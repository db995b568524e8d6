package entry

import "errors"

// Errors returned by Decode. Every one of them means "treat as a miss".
var (
	ErrCorrupt  = errors.New("entry: corrupt value")       // bad checksum, truncated, bad lengths
	ErrVersion  = errors.New("entry: unsupported version") // written by a newer or older codec
	ErrNotEntry = errors.New("entry: not an entry")        // magic bytes missing (foreign value)
)

// Encode appends the binary form of e to dst and returns the extended
// slice. The format is versioned and carries a checksum over everything
// after the fixed prefix. TODO(helper): implement.
func Encode(dst []byte, e *Entry) []byte { panic("not implemented") }

// Decode parses b into e. Strings, header fields and Body alias b: the
// caller must not modify b afterwards. Decode never panics on any input.
// TODO(helper): implement.
func Decode(b []byte, e *Entry) error { panic("not implemented") }
