package sidecar

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/testredis"
)

// ATTACK: a client that may only PUBLISH on a tier's channel (no key, no
// other command) empties the L1 of every replica with one oversized
// message. The message itself is refused (it is not signed), but before
// that Redis drops every subscriber whose output buffer the message
// overflows (client-output-buffer-limit pubsub, 32mb hard by default),
// and a sidecar that resubscribes clears its whole L1 (Purger.Subscribed).
// docs/l2.md promises the opposite: "with the key even a client holding
// the tier's own Redis password cannot forge a purge", and the channel
// is authenticated precisely so that "anyone who can PUBLISH on a tier's
// channel" cannot "empty the L1 of every replica".
func TestATTACKAnOversizedPublishOnTheChannelEmptiesEveryReplicasL1(t *testing.T) {
	rs := testredis.Start(t)
	admin := redisClient(t, rs.Addr())
	ctx := context.Background()
	// The attacker's user may publish on the channel and do nothing else.
	if err := admin.Do(ctx, "ACL", "SETUSER", "publisher", "on", ">publisher-password", "resetchannels", "&"+webChannel, "-@all", "+publish").Err(); err != nil {
		t.Fatal(err)
	}
	origin := newOrigin(t, 0)
	cfg := writeConfig(t, smallL1)
	key := map[string]string{fileInvalidationKey: "0123456789abcdef0123456789abcdef\n"}
	b := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg,
		"--secrets-dir", newSecretsDir(t, key).path, "--tier", "web", "--pod-namespace", "shop")
	b.waitReady(t)
	waitSubscribers(t, admin, 1)

	b.get(t, "/x")
	b.expect(t, "/x", "HIT; layer=l1", "/x v1")

	attacker := redis.NewClient(&redis.Options{
		Addr: rs.Addr(), Username: "publisher", Password: "publisher-password",
		Protocol: 2, DisableIdentity: true,
		DialTimeout: time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
	})
	t.Cleanup(func() { _ = attacker.Close() })
	lost := b.metric(t, `tiercache_l2_errors_total{op="subscribe"}`)
	malformed := b.refused(t, "malformed")
	if err := attacker.Publish(ctx, webChannel, strings.Repeat("A", 40<<20)).Err(); err != nil {
		t.Fatalf("the publish-only user could not publish: %v", err)
	}
	// Bounded wait: B either refuses the message (it got it whole) or
	// loses its subscription and resubscribes.
	resubscribed := false
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b.metric(t, `tiercache_l2_errors_total{op="subscribe"}`) > lost {
			resubscribed = true
			break
		}
		if b.refused(t, "malformed") > malformed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B neither refused the message nor resubscribed within 15s")
		}
	}
	if resubscribed {
		t.Errorf("one unsigned 40MB PUBLISH by a publish-only user dropped B's subscription, and B cleared its L1")
	}
	b.expect(t, "/x", "HIT; layer=l1", "/x v1")
}
