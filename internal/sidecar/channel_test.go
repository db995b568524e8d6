package sidecar

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/test/testredis"
)

const webChannel = "tc:shop/web:inval"

// appliedOrRefused waits (bounded) until n has applied or refused a message since
// its purge count was purges and its count of refusals for reason was
// refused, and reports whether it applied one.
func (n *node) appliedOrRefused(t *testing.T, purges, refused float64, reason string) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if n.metric(t, "tiercache_purges_total") > purges {
			return true
		}
		if n.refused(t, reason) > refused {
			return false
		}
	}
	t.Fatalf("sidecar %s neither applied nor refused a message within 5s", n.base)
	return false
}

func (n *node) refused(t *testing.T, reason string) float64 {
	t.Helper()
	return n.metric(t, `tiercache_invalidations_rejected_total{reason="`+reason+`"}`)
}

// receive waits (bounded) for the next message on the subscription.
func receive(t *testing.T, sub *redis.PubSub) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatalf("no message on the channel: %v", err)
	}
	return m.Payload
}

func TestForgedAndReplayedInvalidationsLeaveASidecarsL1Alone(t *testing.T) {
	rs := testredis.Start(t)
	origin := newOrigin(t, 0)
	cfg := writeConfig(t, smallL1)
	args := func(dir string) []string {
		return []string{"--redis-addr", rs.Addr(), "--config", cfg, "--secrets-dir", dir, "--tier", "web", "--pod-namespace", "shop"}
	}
	key := map[string]string{fileInvalidationKey: "0123456789abcdef0123456789abcdef\n"}
	a := startNode(t, origin.URL, args(newSecretsDir(t, key).path)...)
	b := startNode(t, origin.URL, args(newSecretsDir(t, key).path)...)
	a.waitReady(t)
	b.waitReady(t)
	rdb := redisClient(t, rs.Addr())
	sub := rdb.Subscribe(context.Background(), webChannel)
	t.Cleanup(func() { _ = sub.Close() })
	waitSubscribers(t, rdb, 3)

	b.get(t, "/x")
	b.expect(t, "/x", "HIT; layer=l1", "/x v1")

	// Anyone who can publish on the channel forges a purge of everything
	// and an invalidation of /x.
	for _, forged := range []string{
		`{"from":"attacker","all":true}`,
		`{"from":"attacker","invalidate":["http://shop.test/x"]}`,
		`{"ts":1,"nonce":"00000000000000000000000000000000","macs":["00"],"msg":{"from":"attacker","all":true}}`,
	} {
		purges, unsigned, bad := b.metric(t, "tiercache_purges_total"), b.refused(t, "unsigned"), b.refused(t, "bad_mac")
		if err := rdb.Publish(context.Background(), webChannel, forged).Err(); err != nil {
			t.Fatal(err)
		}
		receive(t, sub)
		reason := "unsigned"
		if forged[2] == 't' {
			reason, unsigned = "bad_mac", bad
		}
		if b.appliedOrRefused(t, purges, unsigned, reason) {
			t.Fatalf("B applied the forged message %s", forged)
		}
		b.expect(t, "/x", "HIT; layer=l1", "/x v1")
	}

	// A real purge through A reaches B; replaying it does not.
	purges, bad := b.metric(t, "tiercache_purges_total"), b.refused(t, "bad_mac")
	if status, res := a.purge(t, `{"all":true}`); status != http.StatusOK {
		t.Fatalf("purge through A: %d %+v", status, res)
	}
	signed := receive(t, sub)
	if !b.appliedOrRefused(t, purges, bad, "bad_mac") {
		t.Fatal("B refused A's signed purge")
	}
	b.expect(t, "/x", "MISS", "/x v2")
	b.expect(t, "/x", "HIT; layer=l1", "/x v2")
	purges, replays := b.metric(t, "tiercache_purges_total"), b.refused(t, "replay")
	if err := rdb.Publish(context.Background(), webChannel, signed).Err(); err != nil {
		t.Fatal(err)
	}
	receive(t, sub)
	if b.appliedOrRefused(t, purges, replays, "replay") {
		t.Fatal("B applied a replayed purge")
	}
	b.expect(t, "/x", "HIT; layer=l1", "/x v2")
}

func TestDuringAKeyRotationReplicasOnEitherKeyUnderstandEachOther(t *testing.T) {
	rs := testredis.Start(t)
	origin := newOrigin(t, 0)
	cfg := writeConfig(t, smallL1)
	args := func(dir string) []string {
		return []string{"--redis-addr", rs.Addr(), "--config", cfg, "--secrets-dir", dir, "--tier", "web", "--pod-namespace", "shop", "--log-level", "info"}
	}
	old := map[string]string{fileInvalidationKey: "old-key-0123456789abcdef"}
	secA := newSecretsDir(t, old)
	logsA := &logBuffer{}
	a := startNodeLogging(t, logsA, origin.URL, args(secA.path)...)
	b := startNode(t, origin.URL, args(newSecretsDir(t, old).path)...)
	a.waitReady(t)
	b.waitReady(t)
	rdb := redisClient(t, rs.Addr())
	waitSubscribers(t, rdb, 2)

	// The kubelet has refreshed A's volume, not yet B's.
	secA.project(t, map[string]string{fileInvalidationKey: "new-key-0123456789abcdef"})
	waitLogged(t, logsA, "invalidation key changed; the previous one stays valid for the grace period", 1)

	// B, on the previous key, purges: A applies it.
	a.get(t, "/p")
	a.expect(t, "/p", "HIT; layer=l1", "/p v1")
	purges, bad := a.metric(t, "tiercache_purges_total"), a.refused(t, "bad_mac")
	if status, res := b.purge(t, `{"urls":["/p"]}`); status != http.StatusOK {
		t.Fatalf("purge through B: %d %+v", status, res)
	}
	if !a.appliedOrRefused(t, purges, bad, "bad_mac") {
		t.Fatal("A, rotated, refused B's purge signed with the previous key")
	}
	a.expect(t, "/p", "MISS", "/p v2")

	// A, on the new key, purges: B, which knows only the previous one,
	// applies it too (A signs with both during the grace period).
	b.get(t, "/q")
	b.expect(t, "/q", "HIT; layer=l1", "/q v1")
	purges, bad = b.metric(t, "tiercache_purges_total"), b.refused(t, "bad_mac")
	if status, res := a.purge(t, `{"urls":["/q"]}`); status != http.StatusOK {
		t.Fatalf("purge through A: %d %+v", status, res)
	}
	if !b.appliedOrRefused(t, purges, bad, "bad_mac") {
		t.Fatal("B, not yet rotated, refused A's purge")
	}
	b.expect(t, "/q", "MISS", "/q v2")
}
