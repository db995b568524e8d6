package sidecar

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// Attacker-review tests of issue 12 (the body store). Each one FAILS on
// the code as reviewed: the failure is the weakness.

// ATTACK: without L2, a purge removes a body file only when the purged
// entry is still in L1 (store.Local.Delete reads the reference from L1
// first). A file-backed entry that already left L1 (bigcache evicts FIFO
// when full; any client fills it with a few hundred distinct small URLs)
// keeps its committed file, trailer and all. The operator purges the URL
// (say, content published by mistake, or a poisoned response); every
// check on the running sidecar says it is gone. At the next restart
// (rollout, OOM kill, node drain) bodystore.Open recovers that file and
// reuseBodies puts the purged response back into L1: it is served again
// as a HIT for the rest of its freshness lifetime, without the origin
// being asked. What is gained: purged content comes back; an attacker
// who can make a sidecar restart (e.g. the memory-pressure paths) and
// flood L1 makes purges unreliable.
// Defence: a purge must not depend on L1 still holding the reference:
// e.g. keep a key -> body id index in the body store (the trailer has
// the key already) and remove by key on purge/invalidation, or record
// purges (key, time) durably and drop recovered files older than a purge
// of their key; at least, remove the file when L1 evicts its entry.
func TestATTACK_APurgedBodyWhoseEntryLeftL1ComesBackAfterARestart(t *testing.T) {
	var bigGets atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		if r.URL.Path == "/secret" {
			n := bigGets.Add(1)
			head := fmt.Sprintf("secret v%d ", n)
			_, _ = w.Write([]byte(head + strings.Repeat("s", 200<<10-len(head))))
			return
		}
		_, _ = w.Write([]byte(strings.Repeat("f", 40<<10))) // inline in L1
	}))
	t.Cleanup(origin.Close)
	dir := filepath.Join(t.TempDir(), "bodies")
	cfg := writeConfig(t, "l1: {maxSize: 1Mi, shards: 1}\n")
	args := []string{"--config", cfg, "--body-dir", dir, "--body-dir-size", "64Mi"}

	a := startNode(t, origin.URL, args...)
	a.waitReady(t)
	if r := a.get(t, "/secret"); r.xcache != "MISS" || !strings.HasPrefix(r.body, "secret v1 ") {
		t.Fatalf("first GET: X-Cache %q", r.xcache)
	}
	kept := bodyFiles(t, dir)
	if len(kept) != 1 {
		t.Fatalf("body files after the fill: %v, want one", kept)
	}
	// The attacker floods L1 with small responses: /secret's entry
	// (only its header and a reference) is evicted, its file is not.
	for i := range 200 {
		a.get(t, fmt.Sprintf("/flood/%d", i))
	}
	// The operator purges /secret.
	if status, res := a.purge(t, `{"urls":["/secret"]}`); status != http.StatusOK {
		t.Fatalf("purge: %d %+v", status, res)
	}
	_, statErr := os.Stat(kept[0])
	a.shutdown(t)

	b := startNode(t, origin.URL, args...)
	b.waitReady(t)
	r := b.get(t, "/secret")
	if r.xcache != "MISS" || !strings.HasPrefix(r.body, "secret v2 ") {
		t.Fatalf("GET /secret after its purge and a restart: X-Cache %q, body starts %q; want a MISS with the origin's "+
			"new body (the purged body's file survived the purge: stat err %v)", r.xcache, r.body[:min(len(r.body), 10)], statErr)
	}
}
