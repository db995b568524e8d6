package l2

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/entry"
)

const (
	tagBatch  = 100  // tag sets read per pipeline
	sremBatch = 1000 // members per SREM
	scanCount = 1000 // SCAN COUNT hint
	getBatch  = 64   // GETs per pipeline when values are read in bulk
)

// PurgeTags deletes every entry stored with any of tags and returns how
// many existed. For each tag it reads the tag set (SMEMBERS), deletes the
// members (one DEL per key, pipelined), then removes those members from
// the set with SREM, so the set disappears once empty. (Rather than DEL of
// the set: an entry tagged while the purge runs keeps its membership, and
// a purge that fails half-way leaves the rest for a retry.) Members that
// are not this tier's entry key names are dropped from the set without
// being deleted.
func (c *Client) PurgeTags(ctx context.Context, tags []string) (int, error) {
	tags = dedupe(tags)
	purged := 0
	for len(tags) > 0 {
		batch := tags[:min(len(tags), tagBatch)]
		tags = tags[len(batch):]
		n, err := c.purgeTagBatch(ctx, batch)
		purged += n
		if err != nil {
			return purged, wrapErr("purge tags", err)
		}
	}
	return purged, nil
}

func (c *Client) purgeTagBatch(ctx context.Context, tags []string) (int, error) {
	cmds := make([]*redis.StringSliceCmd, len(tags))
	if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, tag := range tags {
			cmds[i] = p.SMembers(ctx, c.k.tagKey(tag))
		}
		return nil
	}); err != nil {
		return 0, err
	}
	var names []string
	seen := make(map[string]struct{})
	for _, cmd := range cmds {
		for _, m := range cmd.Val() {
			if _, dup := seen[m]; !dup && c.k.isEntryKey(m) {
				seen[m] = struct{}{}
				names = append(names, m)
			}
		}
	}
	n, err := c.delEntries(ctx, c.rdb, names)
	if err != nil {
		return n, err
	}
	_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, tag := range tags {
			members := cmds[i].Val()
			for len(members) > 0 {
				chunk := members[:min(len(members), sremBatch)]
				members = members[len(chunk):]
				p.SRem(ctx, c.k.tagKey(tag), toAny(chunk)...)
			}
		}
		return nil
	})
	return n, err
}

// PurgeMatching deletes every entry of this tier for which match returns
// true and returns how many it deleted. It walks every master with SCAN
// (MATCH <prefix>e:*, never KEYS), reads the values in pipelined batches
// and deletes the matches with their chunks (delEntries); values that are
// not this tier's entries are skipped. match is called from one goroutine at a time; e is valid only
// during the call. The walk stops at the first error or when ctx ends,
// returning what it deleted so far.
func (c *Client) PurgeMatching(ctx context.Context, match func(key string, e *entry.Entry) bool) (int, error) {
	var (
		mu     sync.Mutex
		purged atomic.Int64
	)
	err := c.forEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return c.purgeNode(ctx, node.WithTimeout(c.bulkTimeout), func(key string, e *entry.Entry) bool {
			mu.Lock()
			defer mu.Unlock()
			return match(key, e)
		}, &purged)
	})
	return int(purged.Load()), wrapErr("purge matching", err)
}

func (c *Client) purgeNode(ctx context.Context, node *redis.Client, match func(string, *entry.Entry) bool, purged *atomic.Int64) error {
	pattern := globEscape(c.k.entry) + "*"
	var cursor uint64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		names, next, err := node.Scan(ctx, cursor, pattern, scanCount).Result()
		if err != nil {
			return err
		}
		for len(names) > 0 {
			batch := names[:min(len(names), getBatch)]
			names = names[len(batch):]
			vals, err := getAll(ctx, node, batch)
			if err != nil {
				return err
			}
			var doomed []string
			var e entry.Entry
			for i, v := range vals {
				if v == nil || !c.k.isEntryKey(batch[i]) {
					continue
				}
				if key, err := unwrap(v, c.k.prefix, &e); err == nil && match(key, &e) {
					doomed = append(doomed, batch[i])
				}
			}
			n, err := c.delEntries(ctx, node, doomed)
			purged.Add(int64(n))
			if err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// getAll GETs names in one pipeline on r; a missing value is nil.
func getAll(ctx context.Context, r redis.Cmdable, names []string) ([][]byte, error) {
	cmds := make([]*redis.StringCmd, len(names))
	_, err := r.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range names {
			cmds[i] = p.Get(ctx, name)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([][]byte, len(names))
	for i, cmd := range cmds {
		b, err := cmd.Bytes()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, err
		default:
			out[i] = b
		}
	}
	return out, nil
}

func dedupe(ss []string) []string {
	seen := make(map[string]struct{}, len(ss))
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		if _, dup := seen[s]; !dup {
			seen[s] = struct{}{}
			out = append(out, s)
		}
	}
	return out
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
