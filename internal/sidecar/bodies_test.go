package sidecar

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/tiercache/tiercache/test/testredis"
)

// bigOrigin answers every GET with bigBodySize bytes that name the path
// and the request's number, fresh for 5 minutes.
type bigOrigin struct {
	*httptest.Server
	n atomic.Int64
}

const bigBodySize = 200 << 10

func newBigOrigin(t *testing.T) *bigOrigin {
	t.Helper()
	o := &bigOrigin{}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := o.n.Add(1)
		w.Header().Set("Cache-Control", "max-age=300")
		_, _ = w.Write(bigBody(r.URL.Path, n))
	}))
	t.Cleanup(o.Close)
	return o
}

func bigBody(path string, n int64) []byte {
	head := fmt.Sprintf("%s v%d ", path, n)
	return append([]byte(head), bytes.Repeat([]byte{'x'}, bigBodySize-len(head))...)
}

// bodyFiles lists the committed body files in dir.
func bodyFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.body"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestARestartedSidecarServesTheBodiesItKeptWithoutTheOrigin(t *testing.T) {
	origin := newBigOrigin(t)
	dir := filepath.Join(t.TempDir(), "bodies")
	args := []string{"--body-dir", dir, "--body-dir-size", "64Mi"}

	a := startNode(t, origin.URL, args...)
	a.waitReady(t)
	if r := a.get(t, "/big"); r.xcache != "MISS" || r.body != string(bigBody("/big", 1)) {
		t.Fatalf("first GET: X-Cache %q, %d bytes", r.xcache, len(r.body))
	}
	if files := bodyFiles(t, dir); len(files) != 1 {
		t.Fatalf("body files after the fill: %v, want one", files)
	}
	a.shutdown(t)

	b := startNode(t, origin.URL, args...)
	b.waitReady(t)
	if r := b.get(t, "/big"); r.xcache != "HIT; layer=l1" || r.body != string(bigBody("/big", 1)) {
		t.Fatalf("GET after the restart: X-Cache %q, %d bytes, want the kept body as an L1 hit", r.xcache, len(r.body))
	}
	if n := origin.n.Load(); n != 1 {
		t.Fatalf("the origin got %d requests, want 1", n)
	}
}

// With L2, a purge sent while a sidecar is down reaches only Redis and
// the sidecars that are up: the stopped sidecar's kept file must not bring
// the purged body back when it starts again.
func TestAKeptBodyPurgedWhileTheSidecarWasDownIsNotServed(t *testing.T) {
	rs := testredis.Start(t)
	origin := newBigOrigin(t)
	dir := filepath.Join(t.TempDir(), "bodies")
	cfg := writeConfig(t, smallL1)

	a := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg, "--body-dir", dir, "--body-dir-size", "64Mi")
	a.waitReady(t)
	if r := a.get(t, "/big"); r.xcache != "MISS" {
		t.Fatalf("first GET: X-Cache %q", r.xcache)
	}
	old := bodyFiles(t, dir)
	if len(old) != 1 {
		t.Fatalf("body files after the fill: %v, want one", old)
	}
	a.shutdown(t)

	// Another replica of the tier, up while A is down, takes the purge.
	other := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg)
	other.waitReady(t)
	if status, res := other.purge(t, `{"urls":["/big"]}`); status != http.StatusOK {
		t.Fatalf("purge: %d %+v", status, res)
	}

	a2 := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg, "--body-dir", dir, "--body-dir-size", "64Mi")
	a2.waitReady(t)
	if _, err := os.Stat(old[0]); !os.IsNotExist(err) {
		t.Fatalf("the purged body's file %s is still there after the restart (%v)", old[0], err)
	}
	r := a2.get(t, "/big")
	if r.xcache != "MISS" || r.body != string(bigBody("/big", 2)) {
		t.Fatalf("GET after the purge and the restart: X-Cache %q, body starts %q; want a MISS with the origin's new body",
			r.xcache, r.body[:min(len(r.body), 12)])
	}
}

// With L2 and no purge meanwhile, the kept file is reused: Redis still
// holds its entry with the same body.
func TestAKeptBodyWhoseEntryL2StillHoldsIsReused(t *testing.T) {
	rs := testredis.Start(t)
	origin := newBigOrigin(t)
	dir := filepath.Join(t.TempDir(), "bodies")
	cfg := writeConfig(t, smallL1)
	args := []string{"--redis-addr", rs.Addr(), "--config", cfg, "--body-dir", dir, "--body-dir-size", "64Mi"}

	a := startNode(t, origin.URL, args...)
	a.waitReady(t)
	if r := a.get(t, "/big"); r.xcache != "MISS" {
		t.Fatalf("first GET: X-Cache %q", r.xcache)
	}
	waitInL2(t, redisClient(t, rs.Addr()), defaultPrefix, "/big")
	a.shutdown(t)

	b := startNode(t, origin.URL, args...)
	b.waitReady(t)
	if r := b.get(t, "/big"); r.xcache != "HIT; layer=l1" || r.body != string(bigBody("/big", 1)) {
		t.Fatalf("GET after the restart: X-Cache %q, %d bytes, want the kept body as an L1 hit", r.xcache, len(r.body))
	}
	if n := origin.n.Load(); n != 1 {
		t.Fatalf("the origin got %d requests, want 1", n)
	}
	if files := bodyFiles(t, dir); len(files) != 1 {
		t.Fatalf("body files after the restart: %v, want the one kept", files)
	}
}
