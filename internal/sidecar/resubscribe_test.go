package sidecar

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/test/testredis"
)

// A client that may only PUBLISH on a tier's channel (no key, no other
// command) sends one oversized message. The message itself is refused (it
// is not signed), but before that Redis may drop every subscriber whose
// output buffer the message overflows (client-output-buffer-limit pubsub,
// 32mb hard by default). A sidecar that resubscribes then finds the
// tier's invalidation sequence where it left it: nothing was published
// meanwhile, and it keeps its L1 (docs/l2.md, "Purges and invalidations
// across replicas").
func TestAnOversizedPublishOnTheChannelLeavesEveryReplicasL1(t *testing.T) {
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
		// Subscribed runs before the subscription's messages: once B is
		// subscribed again, its decision about L1 has been made.
		waitSubscribers(t, admin, 1)
	}
	t.Logf("B resubscribed: %v", resubscribed)
	b.expect(t, "/x", "HIT; layer=l1", "/x v1")
}

// A sidecar that really missed a message (its subscription was down while
// another sidecar purged) clears its L1 when it resubscribes; one whose
// subscription was down while nothing was published keeps it. The
// subscription is taken down by revoking the sidecar's ACL user's right
// to the channel (Redis drops its subscribers at once, and refuses them
// until the right is given back), so the purge falls in the gap for sure.
func TestAResubscriptionClearsL1OnlyWhenAMessageWasMissed(t *testing.T) {
	for _, tc := range []struct {
		name           string
		purgeMeanwhile bool
		want           string // B's X-Cache for /x after resubscribing
		wantBody       string
	}{
		{"a purge published while B was away clears B's L1", true, "MISS", "/x v2"},
		{"nothing published while B was away keeps B's L1", false, "HIT; layer=l1", "/x v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, admin := aclRedis(t)
			prefix := tierconfig.KeyPrefix("shop", "web")
			do(t, admin, tierACL("tc-shop-web-a", "password-a", prefix)...)
			do(t, admin, tierACL("tc-shop-web-b", "password-b", prefix)...)
			origin := newOrigin(t, 0)
			start := func(logs *logBuffer, pod, user, password string) *node {
				cfg := writeConfig(t, smallL1+fmt.Sprintf("l2: {addresses: ['%s'], username: %s}\n", rs.Addr(), user))
				sec := newSecretsDir(t, map[string]string{fileRedisPassword: password, fileInvalidationKey: "0123456789abcdef0123456789abcdef"})
				return startNodeLogging(t, logs, origin.URL, "--config", cfg, "--secrets-dir", sec.path,
					"--tier", "web", "--pod-namespace", "shop", "--pod-name", pod, "--log-level", "info")
			}
			logsB := &logBuffer{}
			a := start(&logBuffer{}, "a", "tc-shop-web-a", "password-a")
			b := start(logsB, "b", "tc-shop-web-b", "password-b")
			a.waitReady(t)
			b.waitReady(t)
			waitSubscribers(t, admin, 2)
			b.expect(t, "/x", "MISS", "/x v1")
			b.expect(t, "/x", "HIT; layer=l1", "/x v1")
			waitInL2(t, admin, prefix, "/x")

			lost := b.metric(t, `tiercache_l2_errors_total{op="subscribe"}`)
			do(t, admin, "ACL", "SETUSER", "tc-shop-web-b", "resetchannels")
			waitSubscribers(t, admin, 1)
			if tc.purgeMeanwhile {
				if code, res := a.purge(t, `{"urls":["/x"]}`); code != 200 || res.L2 == nil || *res.L2 != 1 {
					t.Fatalf("A's purge: %d %+v, want 200 with one entry gone from L2", code, res)
				}
			}
			do(t, admin, "ACL", "SETUSER", "tc-shop-web-b", "&"+prefix+"inval")
			for deadline := time.Now().Add(15 * time.Second); b.metric(t, `tiercache_l2_errors_total{op="subscribe"}`) <= lost; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("B did not resubscribe within 15s of getting the channel back")
				}
			}
			// B has decided about its L1 once it says so (the
			// resubscription reads the sequence counter first): wait
			// for that line, either one, then check which.
			const kept, cleared = "resubscribed to invalidations; none was published meanwhile, L1 kept",
				"resubscribed to invalidations; L1 cleared, messages may have been missed"
			for deadline := time.Now().Add(15 * time.Second); len(logsB.records(kept))+len(logsB.records(cleared)) == 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("B did not log its resubscription within 15s of getting the channel back")
				}
			}
			if got := len(logsB.records(cleared)) > 0; got != tc.purgeMeanwhile {
				t.Errorf("B cleared its L1 at the resubscription: %v, want %v", got, tc.purgeMeanwhile)
			}
			b.expect(t, "/x", tc.want, tc.wantBody)
			if d := aclDenials(t, admin); slices.ContainsFunc(d, func(s string) bool { return !strings.Contains(s, webChannel) }) {
				t.Errorf("the server denied the sidecars more than B's channel: %v", d)
			}
		})
	}
}
