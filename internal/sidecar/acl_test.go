package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/test/testredis"
)

// tierACL is the ACL SETUSER of docs/l2.md for the tier with prefix: the
// product's own (l2.ACLSetUser, which kubectl tiercache analyze prints).
// The test below fails without any one of its commands except three it
// does not reach: hello (checked against the unauthenticated connection's
// user), ping (the subscription's probe after 3s of quiet) and
// zremrangebyrank (the hot set's trim, every few thousand hits).
func tierACL(user, password, prefix string) []any {
	var args []any
	for _, w := range l2.ACLSetUser(user, password, prefix, false) {
		args = append(args, w)
	}
	return args
}

// aclDenials returns what the server's ACL LOG recorded as denied:
// "user: object (reason)".
func aclDenials(t *testing.T, c redis.UniversalClient) []string {
	t.Helper()
	entries, err := c.ACLLog(context.Background(), 100).Result()
	if err != nil {
		t.Fatalf("ACL LOG: %v", err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, fmt.Sprintf("%s: %s (%s, %d times)", e.Username, e.Object, e.Reason, e.Count))
	}
	return out
}

// isNoPerm reports whether err is Redis's refusal for lack of permission.
func isNoPerm(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOPERM")
}

func TestTierACLsKeepTiersInOneRedisApartWhileEachSidecarWorksFully(t *testing.T) {
	rs, admin := aclRedis(t)
	type tier struct{ ns, name, user, password string }
	tiers := []tier{
		{"shop", "web", "tc-shop-web", "shop-web-password"},
		{"bank", "accounts", "tc-bank-accounts", "bank-accounts-password"},
	}
	for _, tr := range tiers {
		do(t, admin, tierACL(tr.user, tr.password, tierconfig.KeyPrefix(tr.ns, tr.name))...)
	}
	shop, bank := tiers[0], tiers[1]
	bankPrefix := tierconfig.KeyPrefix(bank.ns, bank.name)

	// The bank tier has an entry.
	bankKey := "http\x00bank.test/balance"
	bankClient, err := l2.New(l2.Config{Addrs: []string{rs.Addr()}, Username: bank.user, Password: bank.password,
		Prefix: bankPrefix, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bankClient.Close() })
	bankEntry := &entry.Entry{Kind: entry.KindResponse, Host: "bank.test", Target: "/balance", Status: 200,
		Body: []byte("1000000"), ResponseTime: time.Now(), Lifetime: time.Hour}
	if err := bankClient.Set(context.Background(), bankKey, bankEntry, time.Hour); err != nil {
		t.Fatalf("the bank tier's own write: %v", err)
	}

	// The shop tier's credentials, aimed at the bank tier's keys: the real
	// L2 client with the bank's prefix, and a raw client.
	intruder, err := l2.New(l2.Config{Addrs: []string{rs.Addr()}, Username: shop.user, Password: shop.password,
		Prefix: bankPrefix, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = intruder.Close() })
	ctx := context.Background()
	if _, err := intruder.Get(ctx, bankKey); !isNoPerm(err) {
		t.Errorf("the shop tier's L2 client read the bank tier's entry: %v", err)
	}
	forged := &entry.Entry{Kind: entry.KindResponse, Host: "bank.test", Target: "/balance", Status: 200,
		Body: []byte("0"), ResponseTime: time.Now(), Lifetime: time.Hour}
	if err := intruder.Set(ctx, bankKey, forged, time.Hour); !isNoPerm(err) {
		t.Errorf("the shop tier's L2 client wrote the bank tier's entry: %v", err)
	}
	if err := intruder.Publish(ctx, []byte(`{"from":"x","all":true}`)); !isNoPerm(err) {
		t.Errorf("the shop tier's L2 client published on the bank tier's channel: %v", err)
	}
	raw := redis.NewClient(&redis.Options{Addr: rs.Addr(), Username: shop.user, Password: shop.password, Protocol: 2,
		DisableIdentity: true, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = raw.Close() })
	names, _, err := raw.Scan(ctx, 0, bankPrefix+"*", 1000).Result()
	if err != nil || len(names) == 0 {
		t.Fatalf("SCAN as the shop tier: %v %v (SCAN is not filtered by key patterns; docs/l2.md says so)", names, err)
	}
	for _, cmd := range [][]any{
		{"GET", names[0]},
		{"SET", names[0], "x"},
		{"DEL", names[0]},
		{"PUBLISH", bankPrefix + "inval", "x"},
		{"SUBSCRIBE", bankPrefix + "inval"},
		{"FLUSHALL"},
		{"KEYS", "*"},
		{"CONFIG", "GET", "*"},
		{"EVAL", "return redis.call('DEL', KEYS[1])", "1", names[0]},
		{"ACL", "WHOAMI"},
	} {
		if err := raw.Do(ctx, cmd...).Err(); !isNoPerm(err) {
			t.Errorf("%v as the shop tier: %v, want NOPERM", cmd, err)
		}
	}
	if got, err := bankClient.Get(ctx, bankKey); err != nil || string(got.Body) != "1000000" {
		t.Fatalf("the bank tier's entry after the attempts: %v %v", got, err)
	}

	// Each tier's sidecars work fully under their restricted user, and
	// the server denied them nothing.
	do(t, admin, "ACL", "LOG", "RESET")
	for _, tr := range tiers {
		t.Run(tr.ns+"/"+tr.name, func(t *testing.T) {
			sidecarsWorkUnderTheirACL(t, rs.Addr(), admin, tr.ns, tr.name, tr.user, tr.password)
		})
	}
	if d := aclDenials(t, admin); len(d) > 0 {
		t.Fatalf("the server denied the sidecars: %v", d)
	}
}

// sidecarsWorkUnderTheirACL runs two sidecars of the tier as user and
// checks store, L2 hit, lease, purge (URL, tag, prefix), invalidation and
// warm start, and that no L2 operation failed.
func sidecarsWorkUnderTheirACL(t *testing.T, addr string, admin redis.UniversalClient, ns, name, user, password string) {
	prefix := tierconfig.KeyPrefix(ns, name)
	origin := newOrigin(t, 0)
	cfg := writeConfig(t, smallL1+fmt.Sprintf("l2: {addresses: ['%s'], username: %s}\n", addr, user))
	sec := newSecretsDir(t, map[string]string{fileRedisPassword: password, fileInvalidationKey: "key-of-" + name + "-0123456789"})
	args := func(pod string) []string {
		return []string{"--config", cfg, "--secrets-dir", sec.path, "--tier", name, "--pod-namespace", ns, "--pod-name", pod}
	}
	a := startNode(t, origin.URL, args("a")...)
	b := startNode(t, origin.URL, args("b")...)
	a.waitReady(t)
	b.waitReady(t)

	// Store and L2 hit; the fill took and released a lease.
	a.expect(t, "/grp/1", "MISS", "/grp/1 v1")
	waitInL2(t, admin, prefix, "/grp/1")
	b.expect(t, "/grp/1", "HIT; layer=l2", "/grp/1 v1")
	if n, err := admin.Keys(context.Background(), prefix+"l:*").Result(); err != nil || len(n) != 0 {
		t.Errorf("leases left behind: %v %v", n, err)
	}

	// Hits are sampled into the hot set (1 in 64).
	for deadline := time.Now().Add(10 * time.Second); ; {
		for range 64 {
			a.get(t, "/grp/1")
		}
		if _, err := admin.ZScore(context.Background(), prefix+"hot", keyHash("/grp/1")).Result(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hot set never recorded /grp/1")
		}
	}
	// Warm start: a new sidecar holds /grp/1 in L1 before it is ready.
	c := startNode(t, origin.URL, args("c")...)
	c.waitReady(t)
	c.expect(t, "/grp/1", "HIT; layer=l1", "/grp/1 v1")

	// Soft purges by URL, tag and prefix rewrite (here: delete, the
	// origin gives no validator or stale window) L2 entries through the
	// same commands.
	for i, body := range []string{`{"urls":["http://shop.test/soft/1"],"soft":true}`, `{"tags":["grp-soft"],"soft":true}`, `{"prefix":"/soft/","soft":true}`} {
		path := fmt.Sprintf("/soft/%d", i+1)
		a.get(t, path)
		waitInL2(t, admin, prefix, path)
		if status, res := a.purge(t, body); status != http.StatusOK || !res.Soft || res.L2 == nil || *res.L2 < 1 {
			t.Fatalf("purge %s: %d %+v", body, status, res)
		}
	}

	// Purges by URL, tag and prefix reach L2 and the other sidecar.
	for i, body := range []string{`{"urls":["http://shop.test/grp/2"]}`, `{"tags":["grp-grp"]}`, `{"prefix":"/grp/"}`} {
		path := fmt.Sprintf("/grp/%d", i+2)
		a.get(t, path)
		waitInL2(t, admin, prefix, path)
		b.get(t, path)
		purges := b.metric(t, "tiercache_purges_total")
		status, res := a.purge(t, body)
		if status != http.StatusOK || res.L2 == nil || *res.L2 < 1 {
			t.Fatalf("purge %s: %d %+v", body, status, res)
		}
		if !b.appliedOrRefused(t, purges, b.refused(t, "bad_mac"), "bad_mac") {
			t.Fatalf("B refused A's purge %s", body)
		}
		if r := b.get(t, path); r.xcache != "MISS" {
			t.Fatalf("after purge %s, B served %s: %q", body, path, r.xcache)
		}
	}

	// An unsafe request through A invalidates B's copy.
	b.get(t, "/grp/9")
	purges := b.metric(t, "tiercache_purges_total")
	if r, err := a.do(http.MethodPost, "/grp/9"); err != nil || r.status != http.StatusOK {
		t.Fatalf("POST through A: %v %v", r, err)
	}
	if !b.appliedOrRefused(t, purges, b.refused(t, "bad_mac"), "bad_mac") {
		t.Fatal("B refused A's invalidation")
	}

	noL2Errors(t, a, b, c)
}

func TestATierACLUserServesATierOnRedisCluster(t *testing.T) {
	cluster := testredis.StartCluster(t, 3)
	prefix := tierconfig.KeyPrefix("shop", "web")
	for _, addr := range cluster.Addrs() {
		node := redisClient(t, addr)
		var words []any
		for _, w := range l2.ACLSetUser("tc-shop-web", "cluster-password", prefix, true) {
			words = append(words, w)
		}
		do(t, node, words...)
	}
	origin := newOrigin(t, 0)
	// A timeout far above the 50ms default: this test is about
	// permissions, and a busy machine must not turn a slow reply into an
	// l2 error that noL2Errors takes for a denial.
	cfg := writeConfig(t, smallL1+fmt.Sprintf("l2: {addresses: ['%s'], mode: cluster, username: tc-shop-web, timeout: 2s}\n",
		strings.Join(cluster.Addrs(), "', '")))
	sec := newSecretsDir(t, map[string]string{fileRedisPassword: "cluster-password", fileInvalidationKey: "cluster-key-0123456789"})
	args := func(pod string) []string {
		return []string{"--config", cfg, "--secrets-dir", sec.path, "--tier", "web", "--pod-namespace", "shop", "--pod-name", pod}
	}
	a := startNode(t, origin.URL, args("a")...)
	b := startNode(t, origin.URL, args("b")...)
	a.waitReady(t)
	b.waitReady(t)
	rdb := redisClient(t, cluster.Addrs()...)

	// Enough keys to land on every master.
	var paths []string
	for i := range 6 {
		paths = append(paths, fmt.Sprintf("/grp/%d", i))
	}
	for _, p := range paths {
		a.expect(t, p, "MISS", p+" v1")
	}
	for _, p := range paths {
		waitInL2(t, rdb, prefix, p)
		b.expect(t, p, "HIT; layer=l2", p+" v1")
	}
	for _, body := range []string{`{"urls":["http://shop.test/grp/0"],"soft":true}`, `{"tags":["grp-grp"],"soft":true}`, `{"prefix":"/grp/","soft":true}`, `{"tags":["grp-grp"]}`, `{"prefix":"/grp/"}`} {
		if status, res := a.purge(t, body); status != http.StatusOK || res.Error != "" {
			t.Fatalf("purge %s: %d %+v", body, status, res)
		}
	}
	for _, addr := range cluster.Addrs() {
		if d := aclDenials(t, redisClient(t, addr)); len(d) > 0 {
			t.Errorf("node %s denied the sidecars: %v", addr, d)
		}
	}
	noL2Errors(t, a, b)
}

// noL2Errors fails the test for every sidecar whose
// tiercache_l2_errors_total is not 0 (an ACL denial shows there).
func noL2Errors(t *testing.T, nodes ...*node) {
	t.Helper()
	for _, n := range nodes {
		_, body, err := n.adminGet("/metrics")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "tiercache_l2_errors_total{") && !strings.HasSuffix(line, " 0") {
				t.Errorf("sidecar %s: %s", n.base, line)
			}
		}
	}
}
