package l2

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Redis key names, as DESIGN.md fixes them ("Redis (L2)"), with P the
// tier's prefix (tc:<namespace>/<tier>:) and H the hex SHA-256 of the
// cache key:
//
//	P e:H    entry (a wrapped entry.Encode value, see value.go)
//	P t:TAG  tag set: the entry key names (P e:H) stored with TAG
//	P l:H    fetch lease: a random token
//	P inval  invalidation channel (pub/sub)
//	P hot    hotness: sorted set of H scored by sampled hits. An addition
//	         to DESIGN.md, for warm start (Hottest).
//	P iseq   invalidation sequence: a counter every published message
//	         takes a number from (NextSeq), so that a resubscribed
//	         sidecar can tell whether it missed one (Seq). An addition to
//	         DESIGN.md.
//	P b:ID:N chunk N (decimal, from 0) of the body whose random id is ID
//	         (32 hex digits): ChunkSize bytes, the last chunk shorter, of
//	         a file-backed entry's body (see body.go). Written before the
//	         entry that refers to them, removed with it.
//
// Hashing bounds key length whatever the URL, and spreads a tier's entries
// over every cluster slot. Each command names a single key, so nothing
// crosses slots in cluster mode.
type keys struct {
	prefix  string
	entry   string // P e:
	tag     string // P t:
	lease   string // P l:
	channel string // P inval
	hot     string // P hot
	seq     string // P iseq
	body    string // P b:
}

func newKeys(prefix string) keys {
	return keys{
		prefix:  prefix,
		entry:   prefix + "e:",
		tag:     prefix + "t:",
		lease:   prefix + "l:",
		channel: prefix + "inval",
		hot:     prefix + "hot",
		seq:     prefix + "iseq",
		body:    prefix + "b:",
	}
}

// hashLen is the length of a hex SHA-256.
const hashLen = 2 * sha256.Size

// hash is the hex SHA-256 of a cache key.
func hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func (k keys) entryKey(key string) string { return k.entry + hash(key) }
func (k keys) leaseKey(key string) string { return k.lease + hash(key) }
func (k keys) tagKey(tag string) string   { return k.tag + tag }

// isEntryKey reports whether name is one of this tier's entry key names:
// tag sets and the hot set hold only those, and anything else found there
// (planted or corrupt) is never acted on.
func (k keys) isEntryKey(name string) bool {
	return len(name) == len(k.entry)+hashLen && strings.HasPrefix(name, k.entry) && isHex(name[len(k.entry):])
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// globEscape quotes the glob metacharacters of SCAN MATCH in s.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
