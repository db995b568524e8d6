package l1

import (
	"errors"
	"fmt"
	"time"
)

// Config sizes L1. The zero value is not valid; the sidecar fills it from
// the tier's l1 settings (tierconfig holds their defaults).
type Config struct {
	// MaxSize is the number of bytes of entry data L1 may hold. bigcache
	// takes it in whole MiB (HardMaxCacheSize), so it is rounded up to a
	// MiB and split evenly over the shards. New allocates all of it at once
	// (see the package comment).
	MaxSize int64
	// MaxEntrySize is the largest encoded entry accepted. An entry must fit
	// in one shard, so it may not exceed MaxSize/Shards; when it comes
	// within bigcache's per-entry overhead (about 224 bytes) of the shard
	// size, Cache.MaxEntrySize reports the slightly lower limit that Set
	// really applies.
	MaxEntrySize int64
	// Shards is the number of bigcache shards, a power of two. Each has its
	// own lock and holds MaxSize/Shards bytes.
	Shards int
	// LifeWindow is bigcache's global eviction window: the longest any
	// entry lives in L1, whatever its own freshness (bigcache has no
	// per-entry TTL). bigcache counts in whole seconds.
	LifeWindow time.Duration
}

const (
	mib = 1 << 20

	// minShardBytes keeps bigcache's fixed per-entry overhead small next
	// to the largest entry a shard can take.
	minShardBytes = 4 << 10
	// maxShardBytes: bigcache indexes a shard's queue with a uint32.
	maxShardBytes = 1<<32 - 1
	maxShards     = 1 << 16
)

// Validate reports every problem with c, each naming its field.
func (c Config) Validate() error {
	var errs []error
	shardsOK := true
	if c.Shards <= 0 || c.Shards > maxShards || c.Shards&(c.Shards-1) != 0 {
		errs = append(errs, fmt.Errorf("l1.shards: %d is not a power of two between 1 and %d", c.Shards, maxShards))
		shardsOK = false
	}
	if c.MaxSize <= 0 {
		errs = append(errs, fmt.Errorf("l1.maxSize: %d must be > 0", c.MaxSize))
	} else if shardsOK {
		perShard := c.MaxSize / int64(c.Shards)
		switch {
		case perShard < minShardBytes:
			errs = append(errs, fmt.Errorf("l1.maxSize: %d gives %d bytes per shard over %d shards, below the minimum of %d; lower l1.shards",
				c.MaxSize, perShard, c.Shards, minShardBytes))
		case shardBytes(c.MaxSize, c.Shards) > maxShardBytes:
			errs = append(errs, fmt.Errorf("l1.maxSize: %d gives more than 4Gi per shard over %d shards; raise l1.shards",
				c.MaxSize, c.Shards))
		}
		if c.MaxEntrySize > perShard {
			errs = append(errs, fmt.Errorf("l1.maxEntrySize: %d exceeds maxSize/shards (%d)", c.MaxEntrySize, perShard))
		}
	}
	if c.MaxEntrySize <= 0 {
		errs = append(errs, fmt.Errorf("l1.maxEntrySize: %d must be > 0", c.MaxEntrySize))
	}
	if c.LifeWindow < time.Second {
		errs = append(errs, fmt.Errorf("l1.lifeWindow: %v is below bigcache's resolution of 1s", c.LifeWindow))
	}
	return errors.Join(errs...)
}

// hardMaxMiB is bigcache's HardMaxCacheSize for maxSize: whole MiB,
// rounded up.
func hardMaxMiB(maxSize int64) int64 { return (maxSize + mib - 1) / mib }

// shardBytes is the capacity of one bigcache shard's queue.
func shardBytes(maxSize int64, shards int) int64 {
	return hardMaxMiB(maxSize) * mib / int64(shards)
}

// cleanWindow is how often bigcache's cleaner drops entries past
// LifeWindow. Get already treats such entries as misses, so this only
// returns their space early; every tick write-locks each shard briefly.
func cleanWindow(life time.Duration) time.Duration {
	return min(max(life/10, time.Second), time.Minute)
}
