package l1

import (
	"bytes"
	"hash/maphash"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
)

// ExpireMatching applies a soft purge made at at to every entry match
// selects (entry.Entry.Expire: its freshness ends at at) and returns how
// many stored responses the purge concerned. Those still fresh at at are
// rewritten in place, at the same size.
//
// Like DeleteMatching it scans the whole cache, so it is for purges, not
// the request path, and it counts as a removal (Removals): a copy read
// from L2 before the purge marked L2 must not be promoted over its result.
// An entry replaced between being read and rewritten is left as it is and
// not counted: what replaced it was stored after the scan began, when the
// purge had already stopped the fills it overtook from storing (and L2 was
// marked), so it is newer than what the purge marks. Values that do not
// decode are deleted, as DeleteMatching does. match may keep e.
func (c *Cache) ExpireMatching(at time.Time, match func(e *entry.Entry) bool) int {
	c.removals.Add(1)
	n := 0
	it := c.bc.Iterator()
	for it.SetNext() {
		info, err := it.Value()
		if err != nil {
			continue
		}
		v := info.Value()
		e := new(entry.Entry)
		if entry.Decode(v, e) != nil {
			c.deleteStored(info.Key())
			continue
		}
		if !match(e) {
			continue
		}
		concerned, changed := e.Expire(at)
		if !concerned || changed && !c.replace(info.Key(), v, e) {
			continue
		}
		n++
	}
	return n
}

// replace stores e under the stored key sk in place of old, the value read
// before, and reports whether it did: not when sk no longer holds exactly
// old. It holds the key's Set lock, so no Set slips in between the check
// and the write.
func (c *Cache) replace(sk string, old []byte, e *entry.Entry) bool {
	bp := c.bufs.Get().(*[]byte)
	buf := entry.Encode((*bp)[:0], e)
	defer func() {
		if cap(buf) <= maxPooledBuf {
			*bp = buf[:0]
			c.bufs.Put(bp)
		}
	}()
	mu := &c.setMu[maphash.String(c.seed, sk)%stripes]
	mu.Lock()
	defer mu.Unlock()
	cur, err := c.bc.Get(sk)
	if err != nil || !bytes.Equal(cur, old) {
		return false
	}
	// As in Set: delete first so that the replaced value's size leaves
	// bytes.
	_ = c.bc.Delete(sk)
	if c.bc.Set(sk, buf) != nil {
		return false
	}
	c.bytes.Add(footprint(len(sk), len(buf)))
	return true
}
