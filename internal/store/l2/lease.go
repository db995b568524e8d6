package l2

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// releaseScript deletes a lease only while it still holds the caller's
// token: a lease that expired and was taken by another replica is not the
// caller's to delete.
//
// KEYS[1] lease, ARGV[1] token.
var releaseScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0
`)

// extendScript renews a lease only while it still holds the caller's token.
//
// KEYS[1] lease, ARGV[1] token, ARGV[2] ttl in milliseconds.
var extendScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
`)

// ExtendLease renews the lease of key for ttl if it still holds token, so
// that a holder keeps a short lease alive for as long as its fetch runs and
// a holder that dies loses it quickly. held is false when the lease has
// expired or passed to another holder.
func (c *Client) ExtendLease(ctx context.Context, key, token string, ttl time.Duration) (held bool, err error) {
	if ttl <= 0 {
		return false, fmt.Errorf("l2: extend lease %q: ttl must be > 0 (got %s)", key, ttl)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	n, err := extendScript.Run(ctx, c.rdb, []string{c.k.leaseKey(key)}, token, max(ttl, time.Millisecond).Milliseconds()).Int()
	if err != nil {
		return false, wrapErr("extend lease", err)
	}
	return n == 1, nil
}

// AcquireLease tries to take the fetch lease of key for ttl (> 0), so that
// one replica of the tier fetches key from the origin while the others
// wait for L2. ok is false when another holder has it. The token
// identifies this holder to ReleaseLease.
func (c *Client) AcquireLease(ctx context.Context, key string, ttl time.Duration) (token string, ok bool, err error) {
	if ttl <= 0 {
		return "", false, fmt.Errorf("l2: acquire lease %q: ttl must be > 0 (got %s)", key, ttl)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	token = rand.Text()
	ok, err = c.rdb.SetNX(ctx, c.k.leaseKey(key), token, max(ttl, time.Millisecond)).Result()
	if err != nil {
		return "", false, wrapErr("acquire lease", err)
	}
	if !ok {
		return "", false, nil
	}
	return token, true, nil
}

// ReleaseLease gives up the lease of key if it still holds token (compare
// and delete, atomically in Lua). Releasing a lease that expired or passed
// to another holder does nothing and is not an error.
func (c *Client) ReleaseLease(ctx context.Context, key, token string) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	err := releaseScript.Run(ctx, c.rdb, []string{c.k.leaseKey(key)}, token).Err()
	return wrapErr("release lease", err)
}
