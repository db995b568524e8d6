package l2

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/entry"
)

// deleteBatch is the number of DEL commands per pipeline.
const deleteBatch = 1000

// tagScript adds an entry key name to a tag set and makes the set live at
// least as long as that entry: the set's TTL only ever grows. (PEXPIRE GT
// would do, but only from Redis 7; the script works on every version.)
// It names one key, the tag set, so it runs on that key's node in cluster
// mode.
//
// KEYS[1] tag set, ARGV[1] entry key name, ARGV[2] entry TTL in ms.
var tagScript = redis.NewScript(`
redis.call("SADD", KEYS[1], ARGV[1])
local ttl = tonumber(ARGV[2])
if redis.call("PTTL", KEYS[1]) < ttl then
	redis.call("PEXPIRE", KEYS[1], ttl)
end
return 1
`)

// Get returns the entry stored for key. A missing value is ErrNotFound; so
// is a value that is not this tier's entry for key (not our wrapper,
// truncated, failing the entry checksum, or holding another key), which is
// deleted on the way. The entry's strings and body share one buffer that
// belongs to the caller.
func (c *Client) Get(ctx context.Context, key string) (entry.Entry, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	name := c.k.entryKey(key)
	b, err := c.rdb.Get(ctx, name).Bytes()
	if errors.Is(err, redis.Nil) {
		return entry.Entry{}, ErrNotFound
	}
	if err != nil {
		return entry.Entry{}, wrapErr("get", err)
	}
	var e entry.Entry
	if err := unwrapFor(b, c.k.prefix, key, &e); err != nil {
		// Best effort: whatever it is, nobody can use it.
		_ = c.rdb.Del(ctx, name).Err()
		return entry.Entry{}, ErrNotFound
	}
	return e, nil
}

// Set stores e under key for ttl (> 0), and adds key to the tag set of each
// of e.Tags, all in one pipeline.
func (c *Client) Set(ctx context.Context, key string, e *entry.Entry, ttl time.Duration) error {
	if err := checkItem(key, e, ttl); err != nil {
		return err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	return wrapErr("set", c.set(ctx, []Item{{Key: key, Entry: e, TTL: ttl}}))
}

// SetMany is Set for many entries in one pipeline (split per node in
// cluster mode). Nothing is sent when any item is invalid.
func (c *Client) SetMany(ctx context.Context, items []Item) error {
	for i := range items {
		if err := checkItem(items[i].Key, items[i].Entry, items[i].TTL); err != nil {
			return fmt.Errorf("%w (item %d)", err, i)
		}
	}
	if len(items) == 0 {
		return nil
	}
	return wrapErr("set many", c.set(ctx, items))
}

func checkItem(key string, e *entry.Entry, ttl time.Duration) error {
	switch {
	case e == nil:
		return fmt.Errorf("l2: set %q: nil entry", key)
	case ttl <= 0:
		return fmt.Errorf("l2: set %q: ttl must be > 0 (got %s)", key, ttl)
	}
	return nil
}

// tagCall is one queued tagScript call, kept to redo it with EVAL.
type tagCall struct {
	cmd  *redis.Cmd
	set  string
	name string
	ms   int64
}

func (c *Client) set(ctx context.Context, items []Item) error {
	var tags []tagCall
	cmds, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, it := range items {
			// Redis counts whole milliseconds; never round a short TTL to
			// "no expiry".
			ttl := max(it.TTL, time.Millisecond)
			name := c.k.entryKey(it.Key)
			p.Set(ctx, name, wrap(c.k.prefix, it.Key, it.Entry), ttl)
			for _, tag := range it.Entry.Tags {
				t := tagCall{set: c.k.tagKey(tag), name: name, ms: ttl.Milliseconds()}
				t.cmd = tagScript.EvalSha(ctx, p, []string{t.set}, t.name, t.ms)
				tags = append(tags, t)
			}
		}
		return nil
	})
	if err == nil {
		return nil
	}
	// A server forgets its scripts when it restarts: EVALSHA answers
	// NOSCRIPT, and EVAL, which sends the source, caches it again.
	var redo []tagCall
	for _, t := range tags {
		if redis.HasErrorPrefix(t.cmd.Err(), "NOSCRIPT") {
			redo = append(redo, t)
		}
	}
	if len(redo) == 0 {
		return err
	}
	for _, cmd := range cmds {
		if e := cmd.Err(); e != nil && !redis.HasErrorPrefix(e, "NOSCRIPT") {
			return e
		}
	}
	_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, t := range redo {
			tagScript.Eval(ctx, p, []string{t.set}, t.name, t.ms)
		}
		return nil
	})
	return err
}

// Delete removes the entries of keys (one DEL per key, pipelined). Missing
// keys are not an error.
func (c *Client) Delete(ctx context.Context, keys ...string) error {
	_, err := c.DeleteCount(ctx, keys...)
	return err
}

// DeleteCount is Delete reporting how many of the entries existed (purges
// say how many entries went).
func (c *Client) DeleteCount(ctx context.Context, keys ...string) (int, error) {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = c.k.entryKey(k)
	}
	n, err := c.del(ctx, c.rdb, names)
	return n, wrapErr("delete", err)
}

// del deletes names with one DEL per name, pipelined in batches, and
// returns how many existed.
func (c *Client) del(ctx context.Context, r redis.Cmdable, names []string) (int, error) {
	n := 0
	for len(names) > 0 {
		batch := names[:min(len(names), deleteBatch)]
		names = names[len(batch):]
		cmds := make([]*redis.IntCmd, len(batch))
		_, err := r.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, name := range batch {
				cmds[i] = p.Del(ctx, name)
			}
			return nil
		})
		for _, cmd := range cmds {
			n += int(cmd.Val())
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
