package l2

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/backoff"
)

// healthInterval: a subscription quiet for this long is probed with PING,
// and given up when the PONG does not come within as long again, so a
// silently dead connection (a hung server, a lost peer) is noticed within
// twice this.
const healthInterval = 3 * time.Second

// Channel is the name of the tier's invalidation channel.
func (c *Client) Channel() string { return c.k.channel }

// Publish sends msg on the tier's invalidation channel (<prefix>inval) to
// every subscribed sidecar.
func (c *Client) Publish(ctx context.Context, msg []byte) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	return wrapErr("publish", c.rdb.Publish(ctx, c.k.channel, msg).Err())
}

// Subscribe listens on the tier's invalidation channel and calls onMessage
// with each message, until ctx ends; then it returns ctx.Err(). It returns
// earlier only when the client is closed.
//
// onSubscribed is called after every subscription, the first and each
// one after a lost connection, with the time just before SUBSCRIBE was
// sent (every message delivered on this subscription was published after
// it): messages sent while unsubscribed are lost, so the caller finds out
// whether it missed one (Seq) and clears what it might have invalidated
// (its L1). After
// a failure it subscribes again with capped, jittered exponential backoff.
// Callbacks run on Subscribe's goroutine, one at a time; onMessage's
// argument is the caller's to keep.
func (c *Client) Subscribe(ctx context.Context, onMessage func([]byte), onSubscribed func(since time.Time)) error {
	attempt := 0
	for {
		subscribed, err := c.subscribeOnce(ctx, onMessage, onSubscribed)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, redis.ErrClosed) {
			return wrapErr("subscribe", err)
		}
		if subscribed {
			attempt = 0
		}
		d := c.backoff.Delay(attempt, rand.Float64())
		attempt++
		if !backoff.Sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// subscribeOnce runs one subscription until its connection fails or ctx
// ends, reporting whether it got as far as subscribing.
func (c *Client) subscribeOnce(ctx context.Context, onMessage func([]byte), onSubscribed func(since time.Time)) (subscribed bool, err error) {
	since := time.Now()
	ps := c.rdb.Subscribe(ctx, c.k.channel)
	defer ps.Close()
	// Unblocks the read below as soon as ctx ends.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	probing := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, c.healthInterval)
		if err != nil {
			if ctx.Err() != nil {
				return subscribed, ctx.Err()
			}
			if isTimeout(err) && !probing {
				if err := ps.Ping(ctx); err != nil {
					return subscribed, err
				}
				probing = true
				continue
			}
			return subscribed, err
		}
		probing = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && m.Channel == c.k.channel {
				subscribed = true
				onSubscribed(since)
			}
		case *redis.Message:
			onMessage([]byte(m.Payload))
		}
	}
}

// seqScript takes the next number of the tier's invalidation sequence.
// A missing counter (a new tier, a flushed or restarted Redis, an evicted
// key) starts at a random value, so that a counter that was lost and
// counted again does not come back to a number a sidecar knew. It names
// one key, so it runs on that key's node in cluster mode.
//
// KEYS[1] the counter, ARGV[1] the random start.
var seqScript = redis.NewScript(`
redis.call("SET", KEYS[1], ARGV[1], "NX")
return redis.call("INCR", KEYS[1])
`)

// seqStart is a random start for the invalidation sequence, in [2^32,
// 2^52): far from the small numbers of a counter that INCR recreated, and
// exact in a Lua number.
func seqStart() uint64 { return 1<<32 + rand.Uint64N(1<<52-1<<32) }

// NextSeq takes the next number of the tier's invalidation sequence
// (<prefix>iseq) for a message about to be published.
func (c *Client) NextSeq(ctx context.Context) (uint64, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	n, err := seqScript.Run(ctx, c.rdb, []string{c.k.seq}, seqStart()).Uint64()
	return n, wrapErr("next sequence", err)
}

// Seq reads the tier's invalidation sequence: the number of the last
// message published. A missing counter is started (at a random value,
// as NextSeq would), and existed is false: messages may have been
// published under a counter that is gone. It is bounded by the bulk
// timeout and ctx.
func (c *Client) Seq(ctx context.Context) (n uint64, existed bool, err error) {
	// Not on a request's path, and a failure costs a sidecar its L1.
	ctx, cancel := context.WithTimeout(ctx, c.bulkTimeout)
	defer cancel()
	n, err = c.rdb.Get(ctx, c.k.seq).Uint64()
	if err == nil {
		return n, true, nil
	}
	if !errors.Is(err, redis.Nil) {
		return 0, false, wrapErr("sequence", err)
	}
	if err := c.rdb.SetNX(ctx, c.k.seq, seqStart(), 0).Err(); err != nil {
		return 0, false, wrapErr("sequence", err)
	}
	n, err = c.rdb.Get(ctx, c.k.seq).Uint64()
	return n, false, wrapErr("sequence", err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
