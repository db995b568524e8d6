package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store"
	"github.com/tiercache/tiercache/internal/store/l2"
)

// remote adapts the L2 client and the layered store's write queue to what
// the purger needs.
type remote struct {
	c       *l2.Client
	st      *store.Layered
	publish prometheus.Counter // l2_errors_total{op="publish"}
}

func (r remote) Forget(keys ...string) { r.st.Forget(keys...) }
func (r remote) ForgetAll()            { r.st.ForgetAll() }

func (r remote) Delete(ctx context.Context, keys ...string) (int, error) {
	return r.c.DeleteCount(ctx, keys...)
}
func (r remote) PurgeTags(ctx context.Context, tags []string) (int, error) {
	return r.c.PurgeTags(ctx, tags)
}
func (r remote) PurgeMatching(ctx context.Context, match func(string, *entry.Entry) bool) (int, error) {
	return r.c.PurgeMatching(ctx, match)
}
func (r remote) DeleteKeysIf(ctx context.Context, keys []string, match func(string, *entry.Entry) bool) (int, error) {
	return r.st.DeleteL2KeysIf(ctx, keys, match)
}
func (r remote) PurgeTagsIf(ctx context.Context, tags []string, match func(string, *entry.Entry) bool) (int, error) {
	return r.st.DeleteL2TagsIf(ctx, tags, match)
}
func (r remote) ExpireKeys(ctx context.Context, at time.Time, keys []string, match func(string, *entry.Entry) bool) (int, error) {
	return r.st.ExpireL2Keys(ctx, at, keys, match)
}
func (r remote) ExpireTags(ctx context.Context, at time.Time, tags []string, match func(string, *entry.Entry) bool) (int, error) {
	return r.st.ExpireL2Tags(ctx, at, tags, match)
}
func (r remote) ExpireMatching(ctx context.Context, at time.Time, match func(string, *entry.Entry) bool) (int, error) {
	return r.st.ExpireL2Matching(ctx, at, match)
}
func (r remote) NextSeq(ctx context.Context) (uint64, error)   { return r.c.NextSeq(ctx) }
func (r remote) Seq(ctx context.Context) (uint64, bool, error) { return r.c.Seq(ctx) }
func (r remote) Publish(ctx context.Context, msg []byte) error {
	err := r.c.Publish(ctx, msg)
	if err != nil {
		r.publish.Inc()
	}
	return err
}

// instanceID names this sidecar in invalidation messages: the pod, plus a
// random suffix so that a restarted container is told apart from its
// predecessor.
func instanceID(o Options) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return o.PodNamespace + "/" + o.PodName + "#" + hex.EncodeToString(b[:])
}
