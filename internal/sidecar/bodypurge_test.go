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

// TestAPurgedBodyWhoseEntryLeftL1DoesNotComeBackAfterARestart: without L2, a purge used to remove a
// body file only when the purged entry was still in L1 (it read the
// reference from L1 first). A file-backed entry that already left L1
// (bigcache evicts FIFO when full; any client fills it with a few hundred
// distinct small URLs) kept its committed file, trailer and all. The
// operator purges the URL (content published by mistake, a poisoned
// response); every check on the running sidecar says it is gone. At the
// next restart (rollout, OOM kill, node drain) bodystore.Open recovered
// that file and reuseBodies put the purged response back into L1: it was
// served again as a HIT for the rest of its freshness lifetime, without
// the origin being asked. An attacker who can make a sidecar restart and
// flood L1 made purges unreliable.
//
// Defence: the body store indexes every committed file by its key and
// its entry's identity (host, target, tags), and purges and invalidations
// remove files through that index (store.Local), whether or not L1 still
// holds the entry. Purges by URL, by prefix and by tag are each checked.
func TestAPurgedBodyWhoseEntryLeftL1DoesNotComeBackAfterARestart(t *testing.T) {
	cases := map[string]string{
		"a purge by URL":    `{"urls":["/secret/doc"]}`,
		"a purge by prefix": `{"prefix":"/secret/"}`,
		"a purge by tag":    `{"tags":["secret"]}`,
	}
	for name, purge := range cases {
		t.Run(name, func(t *testing.T) {
			var bigGets atomic.Int64
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "max-age=300")
				if r.URL.Path == "/secret/doc" {
					n := bigGets.Add(1)
					head := fmt.Sprintf("secret v%d ", n)
					w.Header().Set("Surrogate-Key", "secret")
					_, _ = w.Write([]byte(head + strings.Repeat("s", 200<<10-len(head))))
					return
				}
				// Inline in L1, at its size: a type not compressed at
				// store time.
				w.Header().Set("Content-Type", "application/octet-stream")
				_, _ = w.Write([]byte(strings.Repeat("f", 40<<10)))
			}))
			t.Cleanup(origin.Close)
			dir := filepath.Join(t.TempDir(), "bodies")
			cfg := writeConfig(t, "l1: {maxSize: 1Mi, shards: 1}\n")
			args := []string{"--config", cfg, "--body-dir", dir, "--body-dir-size", "64Mi"}

			a := startNode(t, origin.URL, args...)
			a.waitReady(t)
			if r := a.get(t, "/secret/doc"); r.xcache != "MISS" || !strings.HasPrefix(r.body, "secret v1 ") {
				t.Fatalf("first GET: X-Cache %q", r.xcache)
			}
			kept := bodyFiles(t, dir)
			if len(kept) != 1 {
				t.Fatalf("body files after the fill: %v, want one", kept)
			}
			// The attacker floods L1 with small responses: the entry of
			// /secret/doc (only its header and a reference) is evicted,
			// its file is not.
			for i := range 200 {
				a.get(t, fmt.Sprintf("/flood/%d", i))
			}
			if n := a.metric(t, `tiercache_l1_evictions_total{reason="space"}`); n <= 0 {
				t.Fatal("the flood evicted nothing from L1")
			}
			// The operator purges /secret/doc.
			if status, res := a.purge(t, purge); status != http.StatusOK {
				t.Fatalf("purge: %d %+v", status, res)
			}
			if _, err := os.Stat(kept[0]); !os.IsNotExist(err) {
				t.Errorf("the purged body's file is still there after the purge (stat: %v)", err)
			}
			a.shutdown(t)

			b := startNode(t, origin.URL, args...)
			b.waitReady(t)
			r := b.get(t, "/secret/doc")
			if r.xcache != "MISS" || !strings.HasPrefix(r.body, "secret v2 ") {
				t.Fatalf("GET /secret/doc after its purge and a restart: X-Cache %q, body starts %q; want a MISS with the origin's "+
					"new body", r.xcache, r.body[:min(len(r.body), 10)])
			}
		})
	}
}
