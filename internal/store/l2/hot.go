package l2

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/entry"
)

const (
	// hotMax is how many keys the hot set keeps (the hottest).
	hotMax = 10000
	// hotTrimEvery: every hotTrimEvery-th RecordHit of a client also
	// trims the set to hotMax. With the caller sampling 1 in 64 hits that
	// is about one trim per 65,000 hits per sidecar, an O(log N + M)
	// command, while the set can grow past hotMax by at most
	// hotTrimEvery members per sidecar between trims.
	hotTrimEvery = 1024
	// hotPage bounds the members read per ZREVRANGE in Hottest.
	hotPage = 256
)

// RecordHit counts a (sampled) hit of key in the tier's hot set, which
// Hottest reads for warm start: ZINCRBY <prefix>hot 1 <hash of key>. The
// caller samples, e.g. 1 in 64 hits. Now and then it trims the set to the
// hottest 10,000 keys.
func (c *Client) RecordHit(ctx context.Context, key string) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	h := hash(key)
	if c.hits.Add(1)%c.hotTrimEvery != 0 {
		return wrapErr("record hit", c.rdb.ZIncrBy(ctx, c.k.hot, 1, h).Err())
	}
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZIncrBy(ctx, c.k.hot, 1, h)
		// Ranks ascend with the score: drop all but the last hotMax.
		p.ZRemRangeByRank(ctx, c.k.hot, 0, -c.hotMax-1)
		return nil
	})
	return wrapErr("record hit", err)
}

// Hottest returns up to n of the hottest keys that still have an entry,
// hottest first, with their entries, for warm start. Keys whose entries
// expired or do not decode are passed over. It stops before the entries'
// encoded size would exceed maxBytes (<= 0: no limit). Entries are read in
// pipelined batches from the server that holds them, each read bounded by
// the larger of Timeout and 1s, the whole by ctx. On error it returns what
// it has so far with the error.
func (c *Client) Hottest(ctx context.Context, n int, maxBytes int64) ([]KeyEntry, error) {
	var (
		out   []KeyEntry
		total int64
		start int64
	)
	for len(out) < n {
		page := int64(min(max(n-len(out), 16), hotPage))
		members, err := c.rdb.ZRevRange(ctx, c.k.hot, start, start+page-1).Result()
		if err != nil {
			return out, wrapErr("hottest", err)
		}
		start += int64(len(members))
		names := make([]string, 0, len(members))
		for _, m := range members {
			if name := c.k.entry + m; c.k.isEntryKey(name) {
				names = append(names, name)
			}
		}
		vals, err := c.getMany(ctx, names)
		if err != nil {
			return out, wrapErr("hottest", err)
		}
		for i, v := range vals {
			if v == nil {
				continue
			}
			key, enc, err := split(v, c.k.prefix)
			if err != nil || hash(string(key)) != names[i][len(c.k.entry):] {
				continue
			}
			var e entry.Entry
			if entry.Decode(enc, &e) != nil {
				continue
			}
			if maxBytes > 0 && total+int64(len(enc)) > maxBytes {
				return out, nil
			}
			total += int64(len(enc))
			out = append(out, KeyEntry{Key: string(key), Entry: e})
			if len(out) == n {
				return out, nil
			}
		}
		if int64(len(members)) < page {
			break
		}
	}
	return out, nil
}

// getMany GETs names from the masters that hold them, in pipelined
// batches with the bulk read timeout; a missing value is nil.
func (c *Client) getMany(ctx context.Context, names []string) ([][]byte, error) {
	out := make([][]byte, len(names))
	groups := map[*redis.Client][]int{}
	for i, name := range names {
		node := c.single
		if c.cluster != nil {
			var err error
			if node, err = c.cluster.MasterForKey(ctx, name); err != nil {
				return nil, err
			}
		}
		groups[node] = append(groups[node], i)
	}
	batch := make([]string, 0, getBatch)
	for node, idx := range groups {
		node := node.WithTimeout(c.bulkTimeout)
		for len(idx) > 0 {
			part := idx[:min(len(idx), getBatch)]
			idx = idx[len(part):]
			batch = batch[:0]
			for _, i := range part {
				batch = append(batch, names[i])
			}
			vals, err := getAll(ctx, node, batch)
			if err != nil {
				return nil, err
			}
			for j, i := range part {
				out[i] = vals[j]
			}
		}
	}
	return out, nil
}
