package l1

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Config sizes L1. The zero value is not valid. The sidecar builds it from
// a tier's l1 section (tierconfig.L1.CacheConfig), whose defaults live in
// tierconfig; here are only the limits every Config must keep.
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

// The limits of a Config: Validate checks them, and tierconfig validates a
// tier's l1 section with the same Validate, so that a config L1 cannot be
// built from is refused where it is written.
const (
	// MinMaxSize: bigcache allocates whole MiB, so a smaller MaxSize would
	// still take a MiB.
	MinMaxSize = 1 * mib
	// MaxShards bounds the shard count: every shard has its own lock,
	// index maps and scratch buffer.
	MaxShards = 8192
	// MinShardBytes keeps bigcache's fixed per-entry overhead small next
	// to the largest entry a shard can take.
	MinShardBytes = 4 << 10
	// MaxShardBytes: bigcache indexes a shard's queue with a uint32.
	MaxShardBytes = 1<<32 - 1
	// LifeWindow is the LifeWindow the sidecar gives L1: a day, the
	// longest any entry lives on a replica (tierconfig bounds
	// defaults.staleIfUnreachable by it).
	LifeWindow = 24 * time.Hour

	mib = 1 << 20
)

// FieldError is one problem with a Config: the field, named as in a tier's
// config ("l1.shards"), and what is wrong with it. tierconfig reports it
// as its own FieldError.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Validate reports every problem with c, each a *FieldError, joined.
func (c Config) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if c.MaxSize < MinMaxSize {
		add("l1.maxSize", "must be >= %s (got %s)", size(MinMaxSize), size(c.MaxSize))
	}
	shardsOK := c.Shards >= 1 && c.Shards <= MaxShards && c.Shards&(c.Shards-1) == 0
	if !shardsOK {
		add("l1.shards", "must be a power of two between 1 and %d (got %d)", MaxShards, c.Shards)
	}
	if shardsOK && c.MaxSize >= MinMaxSize {
		if per := c.MaxSize / int64(c.Shards); per < MinShardBytes {
			add("l1.shards", "l1.maxSize/l1.shards = %s per shard is below the %s minimum; use fewer shards (got %d)", size(per), size(MinShardBytes), c.Shards)
		} else if per := shardBytes(c.MaxSize, c.Shards); per > MaxShardBytes {
			add("l1.shards", "l1.maxSize/l1.shards = %s per shard is not below the 4Gi maximum; use more shards (got %d)", size(per), c.Shards)
		}
	}
	switch {
	case c.MaxEntrySize <= 0:
		add("l1.maxEntrySize", "must be > 0 (got %s)", size(c.MaxEntrySize))
	case shardsOK && c.MaxSize > 0 && c.MaxEntrySize > c.MaxSize/int64(c.Shards):
		add("l1.maxEntrySize", "must be <= l1.maxSize/l1.shards = %s (got %s)", size(c.MaxSize/int64(c.Shards)), size(c.MaxEntrySize))
	}
	if c.LifeWindow < time.Second {
		add("l1.lifeWindow", "must be >= 1s, bigcache's resolution (got %v)", c.LifeWindow)
	}
	return errors.Join(errs...)
}

// size formats n bytes as a tier's config writes sizes (tierconfig.Size):
// the largest binary suffix that divides it exactly ("512Mi", "1536Ki"),
// else plain bytes, so that a FieldError reads like the config it names.
func size(n int64) string {
	if n > 0 {
		for _, u := range [...]struct {
			mult   int64
			suffix string
		}{{1 << 40, "Ti"}, {1 << 30, "Gi"}, {1 << 20, "Mi"}, {1 << 10, "Ki"}} {
			if n%u.mult == 0 {
				return strconv.FormatInt(n/u.mult, 10) + u.suffix
			}
		}
	}
	return strconv.FormatInt(n, 10)
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
