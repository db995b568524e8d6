// Package l2 owns the sidecar's Redis tier: entries shared by every
// replica of a tier, the chunks of large bodies those entries refer to
// (body.go), their tag sets, fetch leases, the invalidation channel and a
// hotness set for warm start, over go-redis in standalone, Sentinel or
// Cluster mode.
//
// L2 sits behind L1 on the request path and must never make a client wait
// on a sick Redis (DESIGN.md, "Failure semantics"): every socket operation
// is bounded by Config.Timeout, single-key calls are bounded by it as a
// whole, and IsUnavailable classifies the errors that the layered store's
// circuit breaker counts. Values are self-describing and checked on every
// read: anything that is not exactly an entry this tier wrote under that
// key is a miss, deleted, never a crash.
//
// Redis key names follow DESIGN.md ("Redis (L2)"); see keys.go. In cluster
// mode every command names one key, so nothing crosses slots; pipelines
// are split per node by go-redis.
package l2

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/tiercache/tiercache/internal/backoff"
	"github.com/tiercache/tiercache/internal/entry"
)

// ErrNotFound is a miss: no value, or one that is not this tier's entry
// for the key (deleted on sight).
var ErrNotFound = errors.New("l2: not found")

// Item is one entry for SetMany.
type Item struct {
	Key   string
	Entry *entry.Entry
	TTL   time.Duration
}

// KeyEntry is a cache key with its entry, from Hottest.
type KeyEntry struct {
	Key   string
	Entry entry.Entry
}

// minBulkTimeout is the floor of the per-read timeout of bulk operations
// (PurgeMatching, Hottest), whose pipelined replies carry many entries:
// Timeout is sized for one entry on the request path.
const minBulkTimeout = time.Second

// Client is the L2 tier of one CacheTier. It is safe for concurrent use.
//
// Single-key calls (Ping, Get, Set, AcquireLease, ReleaseLease, RecordHit,
// Publish) are bounded by Timeout as a whole, including the wait for a
// pooled connection, the dial and go-redis's one retry. Bulk calls
// (SetMany, Delete, PurgeTags, PurgeMatching, Hottest) are bounded per
// socket operation and by the caller's ctx.
type Client struct {
	rdb redis.UniversalClient
	// Exactly one of these is set: the cluster client, or the client of
	// the single master (standalone, or Sentinel's failover client, which
	// follows the master).
	cluster *redis.ClusterClient
	single  *redis.Client

	k           keys
	timeout     time.Duration
	bulkTimeout time.Duration

	hits atomic.Uint64 // RecordHit calls, to trim the hot set now and then
	// Seams for tests; set by New.
	hotMax         int64               // the hot set keeps this many members
	hotTrimEvery   uint64              // RecordHit trims on every hotTrimEvery-th call
	healthInterval time.Duration       // Subscribe pings a channel this quiet
	backoff        backoff.Exponential // Subscribe's reconnect delays
}

// New returns a client for cfg. It does no network I/O: connections are
// made on first use, so a Redis that is down at start-up costs nothing but
// failed calls. It never panics.
func New(cfg Config) (c *Client, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	opts := &redis.UniversalOptions{
		Addrs:      slices.Clone(cfg.Addrs),
		MasterName: cfg.MasterName,
		Username:   cfg.Username,
		Password:   cfg.Password,
		// RESP2: understood by every server and proxy, and no push
		// notifications to process.
		Protocol: 2,
		// One retry, which reconnects after a pooled connection went bad
		// (a restarted server). Dials are not retried: a refused
		// connection is an answer.
		MaxRetries:            1,
		DialerRetries:         1,
		DialTimeout:           cfg.Timeout,
		ReadTimeout:           cfg.Timeout,
		WriteTimeout:          cfg.Timeout,
		PoolTimeout:           cfg.Timeout,
		ContextTimeoutEnabled: true,
		PoolSize:              cfg.PoolSize,
		// No CLIENT SETINFO on connect: older servers and some proxies
		// reject it.
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if cfg.TLS != nil {
		opts.TLSConfig = cfg.TLS.Clone()
	}
	c = &Client{
		k:              newKeys(cfg.Prefix),
		timeout:        cfg.Timeout,
		bulkTimeout:    max(cfg.Timeout, minBulkTimeout),
		hotMax:         hotMax,
		hotTrimEvery:   hotTrimEvery,
		healthInterval: healthInterval,
		backoff:        backoff.Exponential{Initial: 50 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2, Jitter: 0.5},
	}
	// The go-redis constructors panic only on options they cannot use;
	// Validate has ruled those out, and this keeps the promise regardless.
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("l2: creating the Redis client: %v", r)
		}
	}()
	switch cfg.Mode {
	case ModeCluster:
		c.cluster = redis.NewClusterClient(opts.Cluster())
		c.rdb = c.cluster
	case ModeSentinel:
		c.single = redis.NewFailoverClient(opts.Failover())
		c.rdb = c.single
	default:
		c.single = redis.NewClient(opts.Simple())
		c.rdb = c.single
	}
	return c, nil
}

// Close closes every connection. Calls after Close fail, and Subscribe
// returns.
func (c *Client) Close() error {
	if err := c.rdb.Close(); err != nil {
		return fmt.Errorf("l2: close: %w", err)
	}
	return nil
}

// Ping checks that every master answers.
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	err := c.forEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return node.Ping(ctx).Err()
	})
	return wrapErr("ping", err)
}

// bound limits a single-key call to Timeout.
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.timeout)
}

// forEachMaster calls fn for every master: each cluster master
// (concurrently), or the one server.
func (c *Client) forEachMaster(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	if c.cluster != nil {
		return c.cluster.ForEachMaster(ctx, fn)
	}
	return fn(ctx, c.single)
}

// wrapErr adds the operation to err; nil stays nil.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("l2: %s: %w", op, err)
}
