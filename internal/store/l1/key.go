package l1

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/maphash"
	"unsafe"
)

// maxRawKey is the longest key stored as it is. Longer keys are replaced
// by digestLen bytes: bigcache stores every key in full next to its value
// (with a uint16 length, so a key over 64 KiB would even corrupt its
// layout), and a URL can be made arbitrarily long by a client.
const (
	maxRawKey = 200
	digestLen = 1 + 2*sha256.Size // '#' + hex
)

// storedKey is the key as given to bigcache. Keys that are long or that
// begin with '#' are digested, so a raw key can never equal the digest of
// another; a digest collision would need a SHA-256 collision. The result
// aliases key when it is key; callers must not retain it either.
func storedKey(key string) string {
	if len(key) <= maxRawKey && (len(key) == 0 || key[0] != '#') {
		return key
	}
	// Read-only view of key's bytes, so hashing does not copy it.
	sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(key), len(key)))
	var buf [digestLen]byte
	buf[0] = '#'
	hex.Encode(buf[1:], sum[:])
	return string(buf[:])
}

// hasher is bigcache's key hash: maphash with a per-cache random seed. It
// is faster than bigcache's default FNV-1a and, unlike FNV, an outsider
// cannot craft URLs whose hashes collide with a popular key's, which in
// bigcache would overwrite or delete it (bigcache indexes by hash alone).
type hasher struct{ seed maphash.Seed }

func (h hasher) Sum64(key string) uint64 { return maphash.String(h.seed, key) }
