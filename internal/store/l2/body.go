package l2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bodies of file-backed entries (entry.BodyFile) up to the tier's
// l2.maxBodySize are copied into L2 in chunks, so that another replica
// serves them without an origin fetch. A body's chunks are named by its
// random id, never reused, and are written before the entry that refers
// to them: a replica that sees the entry finds the chunks (unless they
// were evicted or purged since, which reads as a miss).
//
// Each chunk is one plain value of ChunkSize bytes (the last one shorter),
// under its own key, so every command names one key and chunks spread over
// the slots of a cluster. A read checks every chunk's length; the caller
// checks the CRC of the whole body against the entry's (BodyFile.CRC).

// ChunkSize is the size of every chunk but the last.
const ChunkSize = 1 << 20

// MaxChunks bounds a body's chunk count: no body written to L2 is larger
// than 1 GiB (tierconfig bounds l2.maxBodySize far below), and a reference
// claiming more is not acted on.
const MaxChunks = 1 << 10

// minChunkTimeout is the floor of the bound on one chunk's transfer:
// Timeout is sized for one small entry, and 1 MiB needs more than 50 ms on
// a slow link. 250 ms per MiB is 4 MB/s, which any link to Redis beats.
const minChunkTimeout = 250 * time.Millisecond

// chunkTTLMargin makes chunks outlive the entry written after them, so that
// an entry never expires after its body.
const chunkTTLMargin = 10 * time.Second

// chunkWindow is how many chunks are in flight (and buffered) at once.
const chunkWindow = 2

// ErrBodySize: a body size or chunk count out of range.
var ErrBodySize = errors.New("l2: body size out of range")

// ChunksFor is the number of chunks of a body of size bytes.
func ChunksFor(size int64) uint32 {
	return uint32((size + ChunkSize - 1) / ChunkSize)
}

// chunkLen is the length of chunk i of a body of size bytes.
func chunkLen(size int64, i uint32) int64 {
	return min(ChunkSize, size-int64(i)*ChunkSize)
}

func checkBody(size int64, chunks uint32) error {
	if size <= 0 || size > MaxChunks*ChunkSize || chunks != ChunksFor(size) {
		return fmt.Errorf("%w: %d bytes in %d chunks (at most %d bytes in chunks of %d)",
			ErrBodySize, size, chunks, MaxChunks*ChunkSize, ChunkSize)
	}
	return nil
}

// SetBody writes the body of size bytes that src holds as the chunks of
// body id, each living ttl (plus a margin, so that they outlive the entry
// written after them), and returns how many it wrote. Chunks go
// chunkWindow at a time in one pipeline per node, so at most that many are
// buffered; each batch is bounded by ChunkTimeout per chunk (and every
// socket operation by it), the whole by ctx. On an error some chunks may
// have been written: the caller must not write an entry referring to them
// (they expire with their TTL, or DeleteBody removes them).
func (c *Client) SetBody(ctx context.Context, id [16]byte, src io.ReaderAt, size int64, ttl time.Duration) (uint32, error) {
	n := ChunksFor(size)
	if err := checkBody(size, n); err != nil {
		return 0, wrapErr("set body", err)
	}
	if ttl <= 0 {
		return 0, fmt.Errorf("l2: set body: ttl must be > 0 (got %s)", ttl)
	}
	ttl += chunkTTLMargin
	var bufs [chunkWindow][]byte
	for i := uint32(0); i < n; i += chunkWindow {
		batch := make([]chunkOp, 0, chunkWindow)
		for j := i; j < min(n, i+chunkWindow); j++ {
			l := chunkLen(size, j)
			b := &bufs[j-i]
			if int64(cap(*b)) < l {
				*b = make([]byte, ChunkSize)
			}
			buf := (*b)[:l]
			// ReadAt fills buf or says why not (io.EOF may come with a
			// full buf at the end).
			if m, err := src.ReadAt(buf, int64(j)*ChunkSize); m < len(buf) {
				if err == nil || errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return 0, fmt.Errorf("l2: set body: reading chunk %d: %w", j, err)
			}
			batch = append(batch, chunkOp{name: c.k.chunkKey(id, j), val: buf})
		}
		err := c.chunkBatch(ctx, batch, func(p redis.Pipeliner, op *chunkOp) {
			op.cmd = p.Set(ctx, op.name, op.val, ttl)
		})
		if err != nil {
			return 0, wrapErr("set body", err)
		}
	}
	return n, nil
}

// GetBody copies the body of size bytes in chunks chunks of body id into
// dst, chunkWindow chunks at a time (bounded like SetBody). A missing
// chunk, or one of the wrong length, is ErrNotFound. dst may have received
// a part of the body when GetBody fails: the caller discards it (aborts
// its file).
func (c *Client) GetBody(ctx context.Context, id [16]byte, size int64, chunks uint32, dst io.Writer) error {
	if err := checkBody(size, chunks); err != nil {
		return wrapErr("get body", err)
	}
	for i := uint32(0); i < chunks; i += chunkWindow {
		batch := make([]chunkOp, 0, chunkWindow)
		for j := i; j < min(chunks, i+chunkWindow); j++ {
			batch = append(batch, chunkOp{name: c.k.chunkKey(id, j), want: chunkLen(size, j)})
		}
		err := c.chunkBatch(ctx, batch, func(p redis.Pipeliner, op *chunkOp) {
			op.cmd = p.Get(ctx, op.name)
		})
		if errors.Is(err, redis.Nil) {
			return fmt.Errorf("%w: body %x misses a chunk", ErrNotFound, id)
		}
		if err != nil {
			return wrapErr("get body", err)
		}
		for j := range batch {
			v := batch[j].cmd.(*redis.StringCmd).Val()
			if int64(len(v)) != batch[j].want {
				return fmt.Errorf("%w: body %x chunk %d holds %d bytes, not %d", ErrNotFound, id, i+uint32(j), len(v), batch[j].want)
			}
			if _, err := io.WriteString(dst, v); err != nil {
				return fmt.Errorf("l2: get body: writing chunk %d: %w", i+uint32(j), err)
			}
		}
	}
	return nil
}

// ExtendBody sets the TTL of every chunk of body id to ttl (plus the
// margin) and reports whether all of them exist: a refreshed entry whose
// body is in L2 already needs no new copy. Bounded like SetBody.
func (c *Client) ExtendBody(ctx context.Context, id [16]byte, size int64, ttl time.Duration) (bool, error) {
	n := ChunksFor(size)
	if err := checkBody(size, n); err != nil {
		return false, wrapErr("extend body", err)
	}
	ttl += chunkTTLMargin
	all := true
	for i := uint32(0); i < n; i += 64 {
		batch := make([]chunkOp, 0, 64)
		for j := i; j < min(n, i+64); j++ {
			batch = append(batch, chunkOp{name: c.k.chunkKey(id, j)})
		}
		err := c.chunkBatch(ctx, batch, func(p redis.Pipeliner, op *chunkOp) {
			op.cmd = p.PExpire(ctx, op.name, ttl)
		})
		if err != nil {
			return false, wrapErr("extend body", err)
		}
		for j := range batch {
			if !batch[j].cmd.(*redis.BoolCmd).Val() {
				all = false
			}
		}
		if !all {
			return false, nil
		}
	}
	return all, nil
}

// DeleteBody removes the chunks of body id (one DEL per chunk,
// pipelined). Missing chunks are not an error.
func (c *Client) DeleteBody(ctx context.Context, id [16]byte, chunks uint32) error {
	if chunks > MaxChunks {
		return wrapErr("delete body", fmt.Errorf("%w: %d chunks", ErrBodySize, chunks))
	}
	_, err := c.del(ctx, c.rdb, c.k.chunkKeys(nil, id, chunks))
	return wrapErr("delete body", err)
}

// ChunkTimeout is the bound on one chunk's transfer.
func (c *Client) ChunkTimeout() time.Duration { return max(c.timeout, minChunkTimeout) }

// chunkOp is one command of a chunk batch.
type chunkOp struct {
	name string
	val  []byte
	want int64
	cmd  redis.Cmder
}

// chunkBatch sends the commands of ops, queued by add, in one pipeline per
// node, with the socket timeouts and a deadline of ChunkTimeout per
// chunk. It returns the first error of a command (redis.Nil for a missing
// value).
func (c *Client) chunkBatch(ctx context.Context, ops []chunkOp, add func(redis.Pipeliner, *chunkOp)) error {
	per := c.ChunkTimeout()
	groups := make(map[*redis.Client][]int, len(ops))
	var order []*redis.Client
	for i := range ops {
		node := c.single
		if c.cluster != nil {
			var err error
			if node, err = c.cluster.MasterForKey(ctx, ops[i].name); err != nil {
				return err
			}
		}
		if _, ok := groups[node]; !ok {
			order = append(order, node)
		}
		groups[node] = append(groups[node], i)
	}
	for _, node := range order {
		idx := groups[node]
		cctx, cancel := context.WithTimeout(ctx, per*time.Duration(len(idx)))
		_, err := node.WithTimeout(per).Pipelined(cctx, func(p redis.Pipeliner) error {
			for _, i := range idx {
				add(p, &ops[i])
			}
			return nil
		})
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// chunkKey is the name of chunk i of body id: P b:<hex id>:<i>.
func (k keys) chunkKey(id [16]byte, i uint32) string {
	return string(k.appendChunkKey(nil, id, i))
}

func (k keys) appendChunkKey(b []byte, id [16]byte, i uint32) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, k.body...)
	for _, x := range id {
		b = append(b, hexDigits[x>>4], hexDigits[x&0xf])
	}
	b = append(b, ':')
	return strconv.AppendUint(b, uint64(i), 10)
}

// chunkKeys appends the names of the chunks of body id to names.
func (k keys) chunkKeys(names []string, id [16]byte, chunks uint32) []string {
	for i := range min(chunks, MaxChunks) {
		names = append(names, k.chunkKey(id, i))
	}
	return names
}
