package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/invalidate"
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

// Forget drops the queued L2 writes of exact keys, and every queued
// write for any other selector.
func (r remote) Forget(sel invalidate.Selector) {
	if sel.Kind == invalidate.SelectKeys {
		r.st.Forget(sel.Values...)
		return
	}
	r.st.ForgetAll()
}

// Purge applies a purge to L2, each kind of selector with the call that
// reads no more than it must: a hard purge of keys or tags without a
// Match deletes unread (a tag's set names its members), one with a Match
// reads and deletes what is still the value it saw; scans and soft purges
// always read.
func (r remote) Purge(ctx context.Context, sel invalidate.Selector, m invalidate.Mode) (int, error) {
	match := sel.Match
	if match == nil {
		match = func(string, *entry.Entry) bool { return true }
	}
	switch {
	case m.Soft && sel.Kind == invalidate.SelectKeys:
		return r.st.ExpireL2Keys(ctx, m.At, sel.Values, match)
	case m.Soft && sel.Kind == invalidate.SelectTags:
		return r.st.ExpireL2Tags(ctx, m.At, sel.Values, match)
	case m.Soft:
		return r.st.ExpireL2Matching(ctx, m.At, match)
	case sel.Kind == invalidate.SelectAll:
		return r.c.PurgeMatching(ctx, match)
	case sel.Kind == invalidate.SelectKeys && sel.Match == nil:
		return r.c.DeleteCount(ctx, sel.Values...)
	case sel.Kind == invalidate.SelectKeys:
		return r.st.DeleteL2KeysIf(ctx, sel.Values, match)
	case sel.Match == nil:
		return r.c.PurgeTags(ctx, sel.Values)
	default:
		return r.st.DeleteL2TagsIf(ctx, sel.Values, match)
	}
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
