package l1

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/allegro/bigcache/v3"

	"github.com/tiercache/tiercache/internal/entry"
)

var (
	// ErrNotFound is returned for a miss, which includes a value that does
	// not decode (it is deleted) and one past LifeWindow.
	ErrNotFound = errors.New("l1: not found")
	// ErrTooLarge is returned by Set for an entry whose encoding exceeds
	// MaxEntrySize(); nothing in the cache is touched.
	ErrTooLarge = errors.New("l1: entry too large")
)

// bigcache's per-entry overhead, from its source (v3.1.0): an 18-byte
// header (timestamp, hash, key length) and the key before the value, a
// varint length of up to 5 bytes before that in the shard's queue, and
// one unusable byte at the start of every queue.
const (
	bcHeader      = 18
	bcQueuePrefix = 5
	entryOverhead = 1 + bcQueuePrefix + bcHeader + maxRawKey

	// initialShardEntries sizes bigcache's start-up allocation: each shard's
	// index maps get room for this many entries, and its scratch buffer is
	// 1/initialShardEntries of the shard, so that their product (which
	// bigcache uses for the initial queue) is the whole shard.
	initialShardEntries = 64

	// stripes serialize Sets of one key (see Set).
	stripes = 256

	// maxPooledBuf: bigger encode buffers are left to the GC rather than
	// kept in the pool.
	maxPooledBuf = 1 * mib
)

// Cache is the L1 store. It is safe for concurrent use.
type Cache struct {
	bc    *bigcache.BigCache
	seed  maphash.Seed
	limit int64 // largest encoded entry Set accepts

	// setMu serializes the delete-then-set of Set per key hash, which is
	// what keeps bytes exact (see Set).
	setMu [stripes]sync.Mutex

	bufs sync.Pool // *[]byte encode buffers

	// bytes backs Stats.Bytes: up in Set, down in onRemove (expired,
	// evicted, deleted).
	bytes atomic.Int64
	// expired and noSpace back Stats.Expired and Stats.NoSpace.
	expired, noSpace atomic.Int64
	// capacity backs Stats.Capacity: hardMaxMiB(MaxSize) in bytes.
	capacity int64
	// falseHits are lookups bigcache counted as hits that Get reported as
	// misses (past LifeWindow, or not decodable).
	falseHits atomic.Int64
	// removals counts Delete, DeleteMatching and Reset calls (Removals).
	removals atomic.Uint64

	closeOnce sync.Once
	stopAfter func() bool
}

// Stats is a snapshot of the cache's counters. Hits, Misses and Evictions
// only grow (Reset does not clear them).
type Stats struct {
	// Entries in the cache, including any past LifeWindow not yet cleaned.
	Entries int64
	// Bytes is the space those entries take in bigcache's queues (value,
	// stored key, bigcache's header and length prefix), counted from Sets
	// and bigcache's removal callbacks. It excludes space of deleted or
	// replaced entries that bigcache has not yet reused. It is not the
	// memory L1 holds: the queues are MaxSize from the start (see the
	// package comment for the whole bound).
	Bytes int64
	// Evictions counts entries removed because they passed LifeWindow or
	// to make room, not explicit deletes, overwrites or Reset: Expired +
	// NoSpace.
	Evictions int64
	// Expired counts the evictions of entries past LifeWindow.
	Expired int64
	// NoSpace counts the evictions that made room for a new entry: the
	// "cache too small" signal (Varnish's n_lru_nuked).
	NoSpace int64
	// Capacity is the space bigcache's queues may take, in bytes: MaxSize
	// rounded up to a whole MiB.
	Capacity int64
	Hits     int64
	Misses   int64
}

// New builds a cache from cfg (which it validates). The cache's cleaner
// stops when ctx ends or Close is called, whichever comes first. New never
// panics.
func New(ctx context.Context, cfg Config) (*Cache, error) {
	if ctx == nil {
		return nil, errors.New("l1: nil context")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	shard := shardBytes(cfg.MaxSize, cfg.Shards)
	c := &Cache{
		seed:     maphash.MakeSeed(),
		limit:    min(cfg.MaxEntrySize, shard-entryOverhead),
		capacity: hardMaxMiB(cfg.MaxSize) * mib,
	}
	c.bufs.New = func() any { return new([]byte) }

	// bigcache sizes each shard's first queue as (MaxEntriesInWindow /
	// Shards) × MaxEntrySize, capped at the shard's maximum: here exactly
	// the maximum, with small index maps and scratch buffers. Its context
	// never ends (see the package comment); Close stops its cleaner.
	bc, err := bigcache.New(context.Background(), bigcache.Config{
		Shards:             cfg.Shards,
		LifeWindow:         cfg.LifeWindow,
		CleanWindow:        cleanWindow(cfg.LifeWindow),
		MaxEntriesInWindow: cfg.Shards * initialShardEntries,
		MaxEntrySize:       int((shard + initialShardEntries - 1) / initialShardEntries),
		HardMaxCacheSize:   int(hardMaxMiB(cfg.MaxSize)),
		Hasher:             hasher{c.seed},
		OnRemoveWithReason: c.onRemove,
	})
	if err != nil {
		return nil, fmt.Errorf("l1: %w", err)
	}
	c.bc = bc
	c.stopAfter = context.AfterFunc(ctx, func() { _ = c.Close() })
	return c, nil
}

// Close stops the cleaner. The cache stays usable (entries past
// LifeWindow are still never returned, only no longer cleaned in the
// background). Close is idempotent and always returns nil.
func (c *Cache) Close() error {
	c.closeOnce.Do(func() {
		c.stopAfter()
		_ = c.bc.Close()
	})
	return nil
}

// MaxEntrySize is the largest encoded entry (entry.EncodedSize) that Set
// accepts: Config.MaxEntrySize, or less when that comes within bigcache's
// per-entry overhead of the shard size.
func (c *Cache) MaxEntrySize() int64 { return c.limit }

// Get returns the entry stored under key, or ErrNotFound. The entry's
// strings and body alias a buffer of its own that nothing else uses. Get
// does not retain key.
func (c *Cache) Get(key string) (entry.Entry, error) {
	var e entry.Entry
	err := c.GetInto(key, &e)
	return e, err
}

// GetInto is Get decoding into e, reusing e's header slice, so that a
// caller that keeps a scratch Entry pays no allocation for decoding. On a
// miss e is left in an unspecified state.
func (c *Cache) GetInto(key string, e *entry.Entry) error {
	sk := storedKey(key)
	// bigcache v3.1.0 has no callback-style get. It copies the value, and
	// also copies the stored key to compare it (the copy escapes through
	// its collision log call): two allocations we cannot avoid.
	v, info, err := c.bc.GetWithInfo(sk)
	if err != nil {
		return ErrNotFound
	}
	if info.EntryStatus == bigcache.Expired {
		c.falseHits.Add(1)
		return ErrNotFound
	}
	if err := entry.Decode(v, e); err != nil {
		// Never serve it, and do not trip over it again. (Should a fresh
		// value have replaced it in between, that one goes too: a miss.)
		c.falseHits.Add(1)
		c.deleteStored(sk)
		return ErrNotFound
	}
	return nil
}

// Set stores e under key, replacing what was there. It returns ErrTooLarge
// (touching nothing) when the encoded entry exceeds MaxEntrySize(). Set
// does not retain key or e.
func (c *Cache) Set(key string, e *entry.Entry) error {
	if e == nil {
		return errors.New("l1: set: nil entry")
	}
	size := entry.EncodedSize(e)
	if int64(size) > c.limit {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, size, c.limit)
	}
	bp := c.bufs.Get().(*[]byte)
	buf := entry.Encode((*bp)[:0], e)

	sk := storedKey(key)
	mu := &c.setMu[maphash.String(c.seed, sk)%stripes]
	mu.Lock()
	// bigcache replaces an existing entry silently (no OnRemove), which
	// would leave its size in bytes forever; deleting it first reports it.
	// The stripe lock keeps a concurrent Set of the same key from slipping
	// its entry in between the two.
	_ = c.bc.Delete(sk)
	err := c.bc.Set(sk, buf)
	if err == nil {
		c.bytes.Add(footprint(len(sk), len(buf)))
	}
	mu.Unlock()

	if cap(buf) <= maxPooledBuf {
		*bp = buf[:0]
		c.bufs.Put(bp)
	}
	if err != nil {
		// Unreachable while the size check above holds; kept classified.
		return fmt.Errorf("l1: set: %w", err)
	}
	return nil
}

// Delete removes the entry stored under key, if any.
func (c *Cache) Delete(key string) {
	c.removals.Add(1)
	c.deleteStored(storedKey(key))
}

// DeleteIf removes the entry stored under key when match, given that
// entry, returns true, and reports whether it removed one. The look and
// the delete hold the key's Set lock: an entry that a concurrent Set
// stores in between is never the one deleted. It is for a caller that
// found something wrong with the entry it read (its body file is gone),
// not a purge: Removals does not count it. match must not call into the
// cache.
func (c *Cache) DeleteIf(key string, match func(e *entry.Entry) bool) bool {
	sk := storedKey(key)
	mu := &c.setMu[maphash.String(c.seed, sk)%stripes]
	mu.Lock()
	defer mu.Unlock()
	v, err := c.bc.Get(sk)
	if err != nil {
		return false
	}
	var e entry.Entry
	if entry.Decode(v, &e) != nil || !match(&e) {
		return false
	}
	return c.deleteStored(sk)
}

// PurgeIf is DeleteIf for a purge: Removals counts it, so that an L2 hit
// read before it is not copied into L1 after it.
func (c *Cache) PurgeIf(key string, match func(e *entry.Entry) bool) bool {
	c.removals.Add(1)
	return c.DeleteIf(key, match)
}

// Removals counts the calls that removed entries on purpose (Delete,
// PurgeIf, DeleteMatching, Reset), not evictions. A caller that read an entry from
// elsewhere to copy it here compares it before and after: a change means
// the entry may have been purged meanwhile.
func (c *Cache) Removals() uint64 { return c.removals.Load() }

func (c *Cache) deleteStored(sk string) bool { return c.bc.Delete(sk) == nil }

// DeleteMatching deletes every entry for which match returns true and
// returns how many it deleted. It scans the whole cache (copying each
// entry out of bigcache), so it is for purges, not the request path. It is
// safe to run concurrently with every other method; entries set during the
// scan may or may not be seen, and an entry replaced between being read
// and deleted goes as well (a purge may take a little more, never less).
// Values that do not decode are deleted too (and not counted). match may
// keep e: it is fresh on every call.
func (c *Cache) DeleteMatching(match func(e *entry.Entry) bool) int {
	c.removals.Add(1)
	n := 0
	it := c.bc.Iterator()
	for it.SetNext() {
		info, err := it.Value()
		if err != nil {
			continue
		}
		e := new(entry.Entry)
		if entry.Decode(info.Value(), e) != nil {
			c.deleteStored(info.Key())
			continue
		}
		if match(e) && c.deleteStored(info.Key()) {
			n++
		}
	}
	return n
}

// Reset drops every entry.
func (c *Cache) Reset() {
	c.removals.Add(1)
	// With every stripe held no Set is between its add to bytes and its
	// bigcache.Set, and every removal bigcache reports happens under the
	// shard lock that Reset also takes, so bytes is exact afterwards.
	for i := range c.setMu {
		c.setMu[i].Lock()
	}
	_ = c.bc.Reset()
	c.bytes.Store(0)
	for i := range c.setMu {
		c.setMu[i].Unlock()
	}
}

// Stats returns the current counters.
func (c *Cache) Stats() Stats {
	s := c.bc.Stats()
	notHits := c.falseHits.Load()
	return Stats{
		Entries:   int64(c.bc.Len()),
		Bytes:     c.bytes.Load(),
		Evictions: c.expired.Load() + c.noSpace.Load(),
		Expired:   c.expired.Load(),
		NoSpace:   c.noSpace.Load(),
		Capacity:  c.capacity,
		Hits:      s.Hits - notHits,
		// A 64-bit hash collision is a miss that bigcache counts apart.
		Misses: s.Misses + s.Collisions + notHits,
	}
}

// onRemove is bigcache's OnRemoveWithReason. It runs under a shard lock
// and must not call back into the cache.
func (c *Cache) onRemove(key string, value []byte, reason bigcache.RemoveReason) {
	c.bytes.Add(-footprint(len(key), len(value)))
	switch reason {
	case bigcache.Expired:
		c.expired.Add(1)
	case bigcache.NoSpace:
		c.noSpace.Add(1)
	}
}

// footprint is the queue space one entry takes in bigcache v3.1.0: its
// wrapped form (header, key, value) behind a varint length that counts
// itself (queue.getNeededSize).
func footprint(keyLen, valueLen int) int64 {
	w := int64(bcHeader + keyLen + valueLen)
	switch {
	case w < 1<<7-1:
		return w + 1
	case w < 1<<14-2:
		return w + 2
	case w < 1<<21-3:
		return w + 3
	case w < 1<<28-4:
		return w + 4
	}
	return w + 5
}
