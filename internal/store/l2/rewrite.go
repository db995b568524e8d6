package l2

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/entry"
)

// Rewrites change stored entries in place instead of deleting them: a
// soft purge ends their freshness and keeps them for their stale windows
// (package store decides how; this file reads, decides through a Rewrite
// and writes back).

// Rewritten is a Rewrite's decision about one stored entry.
type Rewritten struct {
	// Counted: the entry is one the rewrite concerns, and is counted.
	Counted bool
	// Changed: the Rewrite changed the entry in place; it is written back
	// to live TTL from now, or deleted when TTL ≤ 0 (nothing is left of
	// its use).
	Changed bool
	TTL     time.Duration
}

// Rewrite decides what becomes of the entry stored for key; it may change
// e in place. e is valid only during the call. Calls come from one
// goroutine at a time. A value under an entry key that is not an entry
// this sidecar reads (damaged, or written by a later version) is given
// as key "" and e nil: it can only be left or deleted (Changed, TTL 0).
type Rewrite func(key string, e *entry.Entry) Rewritten

// casScript writes back or deletes an entry only when it still holds the
// value that was read, compared by SHA-1 (change detection, not
// security: the value is the tier's own), so that a write of the key in
// between, a newer response, is never replaced by the older one
// rewritten. Returns 1 when it wrote or deleted, else 0.
//
// KEYS[1] entry key name, ARGV[1] hex SHA-1 of the value read, ARGV[2]
// the new value ("" to delete), ARGV[3] its TTL in ms.
var casScript = redis.NewScript(`
local v = redis.call("GET", KEYS[1])
if not v or redis.sha1hex(v) ~= ARGV[1] then return 0 end
if ARGV[2] == "" then
	redis.call("DEL", KEYS[1])
else
	redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
end
return 1
`)

// RewriteKeys applies fn to the entries stored for keys and returns how
// many it counted (written back, deleted or left as they were). Missing
// keys and values that are not this tier's entries are skipped. Reads
// and writes go to the master of each key, in pipelined batches, each
// socket operation bounded by the bulk timeout.
func (c *Client) RewriteKeys(ctx context.Context, keys []string, fn Rewrite) (int, error) {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = c.k.entryKey(k)
	}
	n, err := c.rewriteByNode(ctx, names, fn)
	return n, wrapErr("rewrite", err)
}

// RewriteTags is RewriteKeys for the entries stored with any of tags. The
// tag sets keep their members: the entries stay.
func (c *Client) RewriteTags(ctx context.Context, tags []string, fn Rewrite) (int, error) {
	tags = dedupe(tags)
	var names []string
	seen := make(map[string]struct{})
	for len(tags) > 0 {
		batch := tags[:min(len(tags), tagBatch)]
		tags = tags[len(batch):]
		cmds := make([]*redis.StringSliceCmd, len(batch))
		if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, tag := range batch {
				cmds[i] = p.SMembers(ctx, c.k.tagKey(tag))
			}
			return nil
		}); err != nil {
			return 0, wrapErr("rewrite tags", err)
		}
		for _, cmd := range cmds {
			for _, m := range cmd.Val() {
				if _, dup := seen[m]; !dup && c.k.isEntryKey(m) {
					seen[m] = struct{}{}
					names = append(names, m)
				}
			}
		}
	}
	n, err := c.rewriteByNode(ctx, names, fn)
	return n, wrapErr("rewrite tags", err)
}

// RewriteMatching applies fn to every entry of this tier and returns how
// many it counted. It walks every master with SCAN as PurgeMatching does;
// the walk stops at the first error or when ctx ends, returning what it
// counted so far.
func (c *Client) RewriteMatching(ctx context.Context, fn Rewrite) (int, error) {
	var (
		mu sync.Mutex
		n  atomic.Int64
	)
	serial := func(key string, e *entry.Entry) Rewritten {
		mu.Lock()
		defer mu.Unlock()
		return fn(key, e)
	}
	pattern := globEscape(c.k.entry) + "*"
	err := c.forEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		node = node.WithTimeout(c.bulkTimeout)
		var cursor uint64
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			names, next, err := node.Scan(ctx, cursor, pattern, scanCount).Result()
			if err != nil {
				return err
			}
			k, err := c.rewrite(ctx, node, names, serial)
			n.Add(int64(k))
			if err != nil {
				return err
			}
			if next == 0 {
				return nil
			}
			cursor = next
		}
	})
	return int(n.Load()), wrapErr("rewrite matching", err)
}

// rewriteByNode rewrites names on the masters that hold them.
func (c *Client) rewriteByNode(ctx context.Context, names []string, fn Rewrite) (int, error) {
	if len(names) == 0 {
		return 0, nil
	}
	if c.cluster == nil {
		return c.rewrite(ctx, c.single.WithTimeout(c.bulkTimeout), names, fn)
	}
	byNode := make(map[*redis.Client][]string)
	for _, name := range names {
		node, err := c.cluster.MasterForKey(ctx, name)
		if err != nil {
			return 0, err
		}
		byNode[node] = append(byNode[node], name)
	}
	total := 0
	for node, names := range byNode {
		n, err := c.rewrite(ctx, node.WithTimeout(c.bulkTimeout), names, fn)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// rewrite reads names (entry key names held by node) in batches, asks fn
// about each entry and writes back or deletes the changed ones with
// casScript. A deleted file-backed entry takes its body's chunks with it.
func (c *Client) rewrite(ctx context.Context, node *redis.Client, names []string, fn Rewrite) (int, error) {
	n := 0
	for len(names) > 0 {
		batch := names[:min(len(names), getBatch)]
		names = names[len(batch):]
		vals, err := getAll(ctx, node, batch)
		if err != nil {
			return n, err
		}
		var (
			calls   []*scriptCall
			chunks  [][]string // per call: the chunks to delete once it applied
			counted []bool     // per call: whether it counts once applied
			e       entry.Entry
		)
		for i, v := range vals {
			if v == nil || !c.k.isEntryKey(batch[i]) {
				continue
			}
			key, err := unwrap(v, c.k.prefix, &e)
			ep := &e
			if err != nil {
				key, ep = "", nil
			}
			d := fn(key, ep)
			if !d.Changed {
				if d.Counted {
					n++
				}
				continue
			}
			sum := sha1.Sum(v)
			args := []any{hex.EncodeToString(sum[:]), "", 0}
			var gone []string
			if d.TTL > 0 && ep != nil {
				args[1], args[2] = wrap(c.k.prefix, key, &e), max(d.TTL, time.Millisecond).Milliseconds()
			} else if ep != nil && e.File != nil && e.File.Chunks > 0 && e.File.Chunks <= MaxChunks {
				gone = c.k.chunkKeys(nil, e.File.ID, e.File.Chunks)
			}
			calls = append(calls, &scriptCall{s: casScript, keys: []string{batch[i]}, args: args})
			chunks = append(chunks, gone)
			counted = append(counted, d.Counted)
		}
		if len(calls) == 0 {
			continue
		}
		cmds, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, sc := range calls {
				sc.queue(ctx, p)
			}
			return nil
		})
		err = redoNoScript(ctx, node, cmds, calls, err)
		var doomed []string
		for i, sc := range calls {
			if v, _ := sc.cmd.Val().(int64); v == 1 {
				if counted[i] {
					n++
				}
				doomed = append(doomed, chunks[i]...)
			}
		}
		// Chunks live in other slots than their entry: through the
		// client, which routes each DEL. Best effort: chunks left behind
		// expire with their TTL.
		_, _ = c.del(ctx, c.rdb, doomed)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
