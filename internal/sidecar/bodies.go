package sidecar

import (
	"context"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store"
)

// bodyRemover is what purges remove body files through: the body store,
// or nil (not a nil *bodystore.Store in an interface) without one.
func (dp *dataPlane) bodyRemover() store.BodyRemover {
	if dp.bodies == nil {
		return nil
	}
	return dp.bodies
}

// reuseBodies puts the entries of the body files that verified at start
// back into g's L1, so that a restarted sidecar serves them without
// asking the origin again.
//
// A purge or invalidation sent while the sidecar was down never reached
// it, and a file it kept must not bring purged content back. Without L2
// nothing can purge a stopped sidecar (its purge endpoint is its own), so
// every file is reused. With L2, purges of the tier remove the entry in
// Redis too: a file is reused only when L2 holds the entry for its key
// with the same body id (a body L2 keeps in chunks), which that lookup
// also promotes into L1; every other file is removed. A body larger than
// l2.maxBodySize is never in L2, so with L2 such files are not reused.
func (dp *dataPlane) reuseBodies(ctx context.Context, g *generation, recovered []bodystore.Recovered) {
	var reused, removed int
	for _, rb := range recovered {
		var e entry.Entry
		if err := entry.Decode(rb.Entry, &e); err != nil || e.File == nil {
			// The body store checked this; never reuse what does not decode.
			continue
		}
		id := e.File.ID
		if g.client == nil {
			if err := g.cache.Set(rb.Key, &e); err == nil {
				reused++
				continue
			}
		} else {
			var cur entry.Entry
			if _, err := g.store.Get(ctx, rb.Key, &cur); err == nil && cur.File != nil && cur.File.ID == id {
				reused++
				continue
			}
		}
		dp.bodies.Remove(id)
		removed++
	}
	dp.log.Info("body store: files kept from before the start", "reused", reused, "removed", removed)
}
