// Package l1 owns the in-process cache tier: entries encoded with the entry
// codec and held in bigcache (v3.1.0), in pointer-free byte queues that
// the garbage collector never has to scan.
//
// bigcache's traps, and what this package does about them:
//
//   - No per-entry TTL: one global LifeWindow, and Get returns entries past
//     it until the cleaner runs. Get here asks bigcache whether the entry
//     is past LifeWindow and reports a miss if so. Freshness and stale
//     windows of an entry are the caller's decision (it has the clock and
//     the entry's times); L1 only guarantees nothing older than LifeWindow
//     is served.
//   - An entry must fit in one shard (MaxSize/Shards bytes, less
//     bigcache's per-entry overhead), and a Set that cannot fit first
//     evicts the whole shard and then fails. Set therefore refuses
//     anything over MaxEntrySize() before bigcache sees it.
//   - A shard's queue starts small and doubles, but bigcache refuses to
//     grow it when capacity+entry would reach the maximum. A queue grown to
//     C bytes (short of the maximum M) cannot take an entry larger than
//     both C and M−C, and trying evicts the whole shard first: a 600 KiB
//     entry into a 1 MiB shard grown to 512 KiB evicts everything and
//     fails. Entries up to a whole shard are normal here (tierconfig sets
//     maxEntrySize to maxSize/shards for small caches), so New allocates
//     every queue at its maximum, the only state in which "fits in a
//     shard" really means it fits. The Go heap counts MaxSize from the
//     start (measured RSS growth of a 256 MiB New: under 2 MiB; the
//     kernel commits pages as entries are written), the queues never grow,
//     and there is no growth copying later. One consequence: with GOGC
//     pacing, garbage may reach MaxSize before the first GC even while the
//     cache is still empty, as it would once the cache is full; the
//     sidecar should run with GOMEMLIMIT set from its memory limit.
//   - bigcache's MaxEntrySize only sizes a per-shard scratch buffer that
//     every Set is wrapped in; passing the real entry limit would allocate
//     Shards × MaxEntrySize more at start. It is passed small instead
//     (MaxSize/Shards/64). The scratch buffer still grows to the largest
//     entry written to that shard and is never shrunk: see Memory below.
//   - bigcache indexes by a 64-bit hash alone (Delete and overwrite go by
//     hash), so the hash is maphash with a random seed (not FNV-1a, which
//     a client could collide on purpose).
//   - bigcache's cleaner prints to stdout when the context given to it
//     ends, so it gets a context that never ends and is stopped through
//     Close, which New arranges to call when ctx ends.
//
// Memory: the Go heap held by a Cache is about
//
//	MaxSize rounded up to a MiB       the shard queues, allocated in New
//	+ Σ over shards of the largest entry ever set into that shard
//	                                  bigcache's scratch buffers; at most
//	                                  Shards × MaxEntrySize() ≤ MaxSize
//	+ about 20-40 bytes per entry     bigcache's index maps
//	+ a few encode buffers            the Set pool
//
// Measured by TestMemoryBound (32 MiB in 64 shards): MaxSize + 6% with
// entries of 100 B to 4 KiB, + 14% with entries up to 64 KiB, and + 100%
// when maximum-size entries have been set into every shard, since each
// scratch buffer then stays a whole shard. Size pods (and GOMEMLIMIT) for
// the last case, or keep Shards × MaxEntrySize well below MaxSize.
package l1
