package sidecar

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/controlplane"
	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/test/testredis"
)

// secretsDir is a directory laid out as the kubelet lays out a projected
// volume: the files are symlinks into ..data, itself a symlink to a
// timestamped directory, and an update swaps ..data atomically.
type secretsDir struct {
	path string
	gen  int
}

func newSecretsDir(t *testing.T, files map[string]string) *secretsDir {
	t.Helper()
	d := &secretsDir{path: t.TempDir()}
	d.project(t, files)
	return d
}

// project replaces the volume's contents with files, as the kubelet's
// atomic writer does.
func (d *secretsDir) project(t *testing.T, files map[string]string) {
	t.Helper()
	d.gen++
	ts := fmt.Sprintf("..2026_11_24_12_00_00.%d", d.gen)
	if err := os.Mkdir(filepath.Join(d.path, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(d.path, ts, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(d.path, "..data"))
	tmp := filepath.Join(d.path, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.path, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{fileRedisPassword, fileRedisCA, filePurgeToken, fileInvalidationKey} {
		link := filepath.Join(d.path, name)
		_, inNew := files[name]
		_, err := os.Lstat(link)
		switch {
		case inNew && err != nil:
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		case !inNew && err == nil:
			if err := os.Remove(link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(d.path, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// waitLogged waits (bounded) until logs hold n records with message msg.
func waitLogged(t *testing.T, logs *logBuffer, msg string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(logs.records(msg)) < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%q logged %d times, want %d", msg, len(logs.records(msg)), n)
		}
	}
}

// purgeWith POSTs body to the admin /purge with a bearer token and
// returns the status.
func (n *node) purgeWith(t *testing.T, token, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, n.admin+"/purge", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := n.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func TestARotatedPurgeTokenIsRequiredFromTheNextPurgeOn(t *testing.T) {
	const oldToken, newToken = "old-token-0123456789", "new-token-0123456789"
	sec := newSecretsDir(t, map[string]string{filePurgeToken: oldToken + "\n"})
	logs := &logBuffer{}
	n := startNodeLogging(t, logs, plainOrigin(t), "--config", writeConfig(t, smallL1), "--secrets-dir", sec.path, "--log-level", "info")
	if got := n.purgeWith(t, oldToken, `{"urls":["/x"]}`); got != http.StatusOK {
		t.Fatalf("purge with the token from the file (its newline trimmed): %d, want 200", got)
	}

	sec.project(t, map[string]string{filePurgeToken: newToken + "\n"})
	waitLogged(t, logs, "secrets applied", 1)
	if got := n.purgeWith(t, oldToken, `{"urls":["/x"]}`); got != http.StatusUnauthorized {
		t.Fatalf("purge with the rotated-out token: %d, want 401", got)
	}
	if got := n.purgeWith(t, newToken, `{"urls":["/x"]}`); got != http.StatusOK {
		t.Fatalf("purge with the new token: %d, want 200", got)
	}
	if rec := logs.records("secrets applied")[0]; fmt.Sprint(rec["changed"]) != "[purge-token]" {
		t.Errorf("logged changed=%v, want [purge-token]", rec["changed"])
	}

	// A removed file is an unset secret: purges only from loopback.
	sec.project(t, map[string]string{})
	waitLogged(t, logs, "secrets applied", 2)
	if got := n.purgeWith(t, newToken, `{"urls":["/x"]}`); got != http.StatusOK {
		t.Fatalf("purge from loopback without a token configured: %d, want 200", got)
	}
	for _, v := range []string{oldToken, newToken} {
		if strings.Contains(logs.String(), v) {
			t.Errorf("the log holds the purge token %q", v)
		}
	}
}

// aclRedis is a redis-server whose default user is the admin (password
// adminPassword); it returns the server and an admin client.
func aclRedis(t *testing.T) (*testredis.Server, redis.UniversalClient) {
	t.Helper()
	rs := testredis.Start(t, testredis.WithPassword(adminPassword))
	admin := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: []string{rs.Addr()}, Password: adminPassword, Protocol: 2, DisableIdentity: true,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	t.Cleanup(func() { _ = admin.Close() })
	return rs, admin
}

const adminPassword = "admin-password-for-tests"

// do runs a command as admin and fails the test on error.
func do(t *testing.T, admin redis.UniversalClient, args ...any) {
	t.Helper()
	if err := admin.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

// String is everything logged.
func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestRotatingTheRedisPasswordKeepsServingAndL2Working(t *testing.T) {
	rs, admin := aclRedis(t)
	do(t, admin, "ACL", "SETUSER", "web", "on", ">old-password", "~tc:shop/web:*", "&tc:shop/web:inval", "+@all")
	origin := newOrigin(t, 0)
	cfg := writeConfig(t, smallL1+fmt.Sprintf("l2: {addresses: ['%s'], username: web}\n", rs.Addr()))
	id := []string{"--tier", "web", "--pod-namespace", "shop"}
	secA := newSecretsDir(t, map[string]string{fileRedisPassword: "old-password\n"})
	secB := newSecretsDir(t, map[string]string{fileRedisPassword: "old-password\n"})
	logsA, logsB := &logBuffer{}, &logBuffer{}
	a := startNodeLogging(t, logsA, origin.URL, append(id, "--config", cfg, "--secrets-dir", secA.path, "--pod-name", "a", "--log-level", "info")...)
	b := startNodeLogging(t, logsB, origin.URL, append(id, "--config", cfg, "--secrets-dir", secB.path, "--pod-name", "b", "--log-level", "info")...)
	a.waitReady(t)
	b.waitReady(t)
	a.get(t, "/before")
	waitInL2(t, admin, "tc:shop/web:", "/before")
	b.expect(t, "/before", "HIT; layer=l2", "/before v1")

	// Clients keep asking both sidecars throughout the rotation.
	stop := make(chan struct{})
	var failures, served atomic.Int64
	var firstFailure atomic.Pointer[string]
	var wg sync.WaitGroup
	for i, n := range []*node{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100000; j++ {
				select {
				case <-stop:
					return
				default:
				}
				r, err := n.do(http.MethodGet, fmt.Sprintf("/load/%d/%d", i, j%50))
				if err != nil || r.status != http.StatusOK {
					failures.Add(1)
					msg := fmt.Sprintf("status %d err %v", r.status, err)
					firstFailure.CompareAndSwap(nil, &msg)
				} else {
					served.Add(1)
				}
			}
		}()
	}

	// The rotation, as docs/operations.md describes it: the user gets the
	// new password next to the old, the Secret is updated (both sidecars
	// reconnect with it), then the old password goes and the user's
	// connections are killed.
	do(t, admin, "ACL", "SETUSER", "web", ">new-password")
	secA.project(t, map[string]string{fileRedisPassword: "new-password\n"})
	secB.project(t, map[string]string{fileRedisPassword: "new-password\n"})
	waitLogged(t, logsA, "secrets applied", 1)
	waitLogged(t, logsB, "secrets applied", 1)
	do(t, admin, "ACL", "SETUSER", "web", "<old-password")
	do(t, admin, "CLIENT", "KILL", "USER", "web")
	servedAtKill := served.Load()

	// L2 works with the new password: a fill through A after the kill is
	// an L2 hit in B (a few paths: A's first L2 write and B's first L2
	// read may meet a killed connection).
	hit := false
	for i := 0; i < 20 && !hit; i++ {
		path := fmt.Sprintf("/after/%d", i)
		a.expect(t, path, "MISS", path+" v1")
		if _, ok := inL2Within(admin, "tc:shop/web:", path); !ok {
			continue
		}
		r := b.get(t, path)
		hit = r.xcache == "HIT; layer=l2"
	}
	if !hit {
		t.Fatal("B never found A's fills in L2 after the rotation")
	}
	for deadline := time.Now().Add(10 * time.Second); served.Load() < servedAtKill+400; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests served after the kill", served.Load()-servedAtKill)
		}
	}
	close(stop)
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d client requests failed during the rotation; first: %s", n, *firstFailure.Load())
	}
	for _, l := range []*logBuffer{logsA, logsB} {
		for _, v := range []string{"old-password", "new-password"} {
			if strings.Contains(l.String(), v) {
				t.Errorf("a sidecar logged the Redis password %q", v)
			}
		}
	}
}

func TestTheConfigVersionAndLoggedHashDoNotDependOnSecretValues(t *testing.T) {
	cfgText := smallL1 + "purge: {token: from-the-file-0123456789}\n"
	versions := map[string]bool{}
	hashes := map[string]bool{}
	for _, token := range []string{"first-token-0123456789", "second-token-0123456789"} {
		sec := newSecretsDir(t, map[string]string{filePurgeToken: token})
		logs := &logBuffer{}
		n := startNodeLogging(t, logs, plainOrigin(t), "--config", writeConfig(t, smallL1), "--secrets-dir", sec.path, "--log-level", "info")
		_, body, err := n.adminGet("/metrics")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, `tiercache_config_info{version="`); ok {
				versions[v] = true
			}
		}
		hashes[fmt.Sprint(logs.records("config loaded")[0]["hash"])] = true
		if strings.Contains(logs.String(), token) {
			t.Errorf("the log holds the purge token")
		}
		n.shutdown(t)
	}
	if len(versions) != 1 || len(hashes) != 1 {
		t.Fatalf("two sidecars differing only in a secret value report versions %v and log hashes %v: an oracle for the value", versions, hashes)
	}
	// A file config's own secret values stay out of the version too.
	c, err := tierconfig.Parse([]byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	if controlplane.Version(redacted(c)) == controlplane.Version(c) {
		t.Fatal("redacted left the token in")
	}
}

func TestSecretFlagsAndTheSecretsDirectoryAreNotBothGiven(t *testing.T) {
	_, err := ParseArgs([]string{"--upstream", "http://x:1", "--secrets-dir", "/s"},
		func(k string) string { return map[string]string{"TIERCACHE_REDIS_PASSWORD": "p"}[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--redis-password (or TIERCACHE_REDIS_PASSWORD) and --secrets-dir") {
		t.Fatalf("err = %v, want it to name --redis-password and --secrets-dir", err)
	}
	err = RunWith(context.Background(), []string{"--upstream", "http://127.0.0.1:1", "--secrets-dir", filepath.Join(t.TempDir(), "none"),
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, noEnv, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "--secrets-dir") {
		t.Fatalf("a missing secrets directory: err = %v, want it to name --secrets-dir", err)
	}
}

func TestThePollFindsAChangeTheWatchMissed(t *testing.T) {
	sec := newSecretsDir(t, map[string]string{filePurgeToken: "first-token-0123456789"})
	// The watch is on another directory: only the poll can see the change.
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	got := make(chan secrets, 16)
	sw := &secretsWatch{w: w, dir: sec.path, poll: 10 * time.Millisecond, settle: time.Hour,
		update: func(s secrets) { got <- s }, log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sw.run(ctx) }()
	defer func() { cancel(); <-done }()

	sec.project(t, map[string]string{filePurgeToken: "second-token-0123456789"})
	deadline := time.After(5 * time.Second)
	for {
		select {
		case s := <-got:
			if s.purgeToken == "second-token-0123456789" {
				return
			}
		case <-deadline:
			t.Fatal("the poll never delivered the new token")
		}
	}
}

func TestSecretsFromTheDirectoryNeverReachTheLastGoodFileOrTheVersion(t *testing.T) {
	const token = "token-from-the-volume-0123456789"
	cp := startControlPlane(t)
	origin := newLiveOrigin(t)
	state := t.TempDir()
	sec := newSecretsDir(t, map[string]string{filePurgeToken: token, fileInvalidationKey: "key-from-the-volume-0123"})
	n := startNode(t, origin.URL, append(liveArgs(cp.addr, state, smallL1), "--secrets-dir", sec.path)...)
	v := cp.publish(t, smallL1+"rules: [{name: a, match: {pathPrefix: /a}, ttl: 60s}]\n")
	n.waitVersion(t, v)
	// The pushed config is in effect with the volume's token.
	if got := n.purgeWith(t, token, `{"urls":["/x"]}`); got != http.StatusOK {
		t.Fatalf("purge with the volume's token under the pushed config: %d", got)
	}
	var raw []byte
	for deadline := time.Now().Add(applyWithin); ; time.Sleep(10 * time.Millisecond) {
		last, err := tierconfig.Load(filepath.Join(state, LastGoodFile))
		if err == nil && controlplane.Version(last) == v {
			if raw, err = os.ReadFile(filepath.Join(state, LastGoodFile)); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never held version %.12s", LastGoodFile, v)
		}
	}
	if strings.Contains(string(raw), token) || strings.Contains(string(raw), "key-from-the-volume") {
		t.Fatalf("%s holds a secret from the volume: %s", LastGoodFile, raw)
	}
}
