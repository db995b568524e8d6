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
	case e.File != nil && e.File.Chunks == 0:
		// Another replica could not serve it: a body local to one
		// replica keeps its entry out of L2.
		return fmt.Errorf("l2: set %q: entry.File.Chunks: a file-backed entry needs its body in L2 (SetBody) first", key)
	case e.File != nil && checkBody(e.File.Size, e.File.Chunks) != nil:
		return fmt.Errorf("l2: set %q: entry.File: %w", key, checkBody(e.File.Size, e.File.Chunks))
	}
	return nil
}

func (c *Client) set(ctx context.Context, items []Item) error {
	var (
		calls []*scriptCall
		swaps []swap
	)
	cmds, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, it := range items {
			// Redis counts whole milliseconds; never round a short TTL to
			// "no expiry".
			ttl := max(it.TTL, time.Millisecond)
			name := c.k.entryKey(it.Key)
			val := wrap(c.k.prefix, it.Key, it.Entry)
			if it.Entry.File != nil {
				// A file-backed entry replaces whatever was there and
				// hands back the value it replaced, whose chunks go with
				// it (unless it is the same body, refreshed).
				sc := &scriptCall{s: swapScript, keys: []string{name}, args: []any{val, ttl.Milliseconds()}}
				sc.queue(ctx, p)
				calls = append(calls, sc)
				swaps = append(swaps, swap{call: sc, id: it.Entry.File.ID})
			} else {
				p.Set(ctx, name, val, ttl)
			}
			for _, tag := range it.Entry.Tags {
				sc := &scriptCall{s: tagScript, keys: []string{c.k.tagKey(tag)}, args: []any{name, ttl.Milliseconds()}}
				sc.queue(ctx, p)
				calls = append(calls, sc)
			}
		}
		return nil
	})
	if err = redoNoScript(ctx, c.rdb, cmds, calls, err); err != nil {
		return err
	}
	if len(swaps) == 0 {
		return nil
	}
	var chunks []string
	for _, sw := range swaps {
		if ref := c.oldBody(sw.call.cmd.Val()); ref != nil && ref.ID != sw.id {
			chunks = c.k.chunkKeys(chunks, ref.ID, ref.Chunks)
		}
	}
	// Best effort: chunks left behind expire with their TTL.
	_, _ = c.del(ctx, c.rdb, chunks)
	return nil
}

// swap is one queued swapScript call and the body id of the entry it
// writes.
type swap struct {
	call *scriptCall
	id   [16]byte
}

// Delete removes the entries of keys (one DEL per key, pipelined). Missing
// keys are not an error.
func (c *Client) Delete(ctx context.Context, keys ...string) error {
	_, err := c.DeleteCount(ctx, keys...)
	return err
}

// DeleteCount is Delete reporting how many of the entries existed (purges
// say how many entries went). The chunks of deleted file-backed entries
// go with them.
func (c *Client) DeleteCount(ctx context.Context, keys ...string) (int, error) {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = c.k.entryKey(k)
	}
	n, err := c.delEntries(ctx, c.rdb, names)
	return n, wrapErr("delete", err)
}

// delEntries deletes the entries names (entry key names) with one
// delScript call per name, pipelined in batches, then the chunks of those
// that were file-backed, and returns how many entries existed. The script
// deletes a value and hands it back when it may be a file-backed entry
// (only those: inline bodies do not travel), so that the chunks it refers
// to are found without another round trip and without a race with a
// write of the key.
func (c *Client) delEntries(ctx context.Context, r redis.Cmdable, names []string) (int, error) {
	n := 0
	var chunks []string
	for len(names) > 0 {
		batch := names[:min(len(names), deleteBatch)]
		names = names[len(batch):]
		calls := make([]*scriptCall, len(batch))
		cmds, err := r.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, name := range batch {
				calls[i] = &scriptCall{s: delScript, keys: []string{name}}
				calls[i].queue(ctx, p)
			}
			return nil
		})
		err = redoNoScript(ctx, r, cmds, calls, err)
		for _, sc := range calls {
			switch v := sc.cmd.Val().(type) {
			case int64:
				n += int(v)
			case string:
				n++
				if ref := c.oldBody(v); ref != nil {
					chunks = c.k.chunkKeys(chunks, ref.ID, ref.Chunks)
				}
			}
		}
		if err != nil {
			return n, err
		}
	}
	// Chunks live in other slots than their entry: through the client,
	// which routes each DEL.
	_, err := c.del(ctx, c.rdb, chunks)
	return n, err
}

// oldBody returns the body reference of v, a value found under one of this
// tier's entry keys, when it is a file-backed entry with chunks in L2;
// else nil.
func (c *Client) oldBody(v any) *entry.BodyFile {
	s, ok := v.(string)
	if !ok {
		return nil
	}
	_, enc, err := split([]byte(s), c.k.prefix)
	if err != nil {
		return nil
	}
	var e entry.Entry
	if entry.Decode(enc, &e) != nil || e.File == nil || e.File.Chunks == 0 || e.File.Chunks > MaxChunks {
		return nil
	}
	return e.File
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
