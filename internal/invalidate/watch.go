package invalidate

import (
	"slices"
	"sync"

	"github.com/tiercache/tiercache/internal/cachekey"
)

// Watches keeps the fills in progress so that a purge or invalidation can
// overtake exactly the fills it concerns: a fill is not stored when its
// own resource (its URL, a purged prefix covering it, or one of its tags)
// was invalidated after it began. Unrelated writes never stop caching,
// which a process-wide purge counter did: under steady write traffic no
// response slower than the interval between writes was ever stored.
//
// One Watches serves every purger of a sidecar (data-plane rebuilds
// replace the purger but may keep L1 and L2, and an old fill may still
// store into them), so it is created once and shared (Purger.UseWatches).
type Watches struct {
	mu  sync.Mutex
	set map[*Watch]struct{}
}

// NewWatches returns an empty registry.
func NewWatches() *Watches {
	return &Watches{set: make(map[*Watch]struct{})}
}

// Watch is one fill in progress. Commit stores the fill unless an
// invalidation overtook it; End removes the watch. Both are safe to call
// concurrently with invalidations.
type Watch struct {
	reg          *Watches
	host, target string // as the purger compares them (ref)

	// mu orders a fill's commit against invalidations of it: an
	// invalidation marks the watch before it deletes anything, and a
	// commit checks the mark and stores while holding mu, so a store can
	// never land after the deletion that should have removed it.
	mu        sync.Mutex
	overtaken bool
	tags      []string // tags purged since the fill began
}

// Begin starts watching the fill of the resource at host (as received in
// the request; both schemes' default ports fold away) and target (path and
// query as keyed). End must be called when the fill is over.
func (ws *Watches) Begin(host, target string) *Watch {
	w := &Watch{reg: ws, host: foldHost(host), target: target}
	ws.mu.Lock()
	ws.set[w] = struct{}{}
	ws.mu.Unlock()
	return w
}

// End stops watching. A nil Watch is allowed.
func (w *Watch) End() {
	if w == nil {
		return
	}
	w.reg.mu.Lock()
	delete(w.reg.set, w)
	w.reg.mu.Unlock()
}

// Commit calls store unless the watched resource, or one of tags (the
// response's surrogate keys), was invalidated since Begin, and reports
// whether it did. Invalidations of the resource wait while store runs.
func (w *Watch) Commit(tags []string, store func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.overtaken || w.tagPurged(tags) {
		return false
	}
	store()
	return true
}

func (w *Watch) tagPurged(tags []string) bool {
	for _, t := range tags {
		if slices.Contains(w.tags, t) {
			return true
		}
	}
	return false
}

// mark records an invalidation on every watch it concerns. It must run
// before the invalidation deletes anything (see Watch.mu).
func (ws *Watches) mark(refs []ref, prefix string, tags []string, all bool) {
	if ws == nil {
		return
	}
	ws.mu.Lock()
	hit := make([]*Watch, 0, len(ws.set))
	for w := range ws.set {
		if all || len(tags) > 0 || concerns(w, refs, prefix) {
			hit = append(hit, w)
		}
	}
	ws.mu.Unlock()
	for _, w := range hit {
		w.mu.Lock()
		if all || concerns(w, refs, prefix) {
			w.overtaken = true
		}
		// The fill's own tags are known only when it commits: remember
		// which were purged meanwhile.
		for _, t := range tags {
			if !slices.Contains(w.tags, t) {
				w.tags = append(w.tags, t)
			}
		}
		w.mu.Unlock()
	}
}

func concerns(w *Watch, refs []ref, prefix string) bool {
	if prefix != "" && underPrefix(w.target, prefix) {
		return true
	}
	for _, r := range refs {
		if r.target == w.target && (r.host == "" || r.host == w.host) {
			return true
		}
	}
	return false
}

// foldHost normalizes a host the way purge references are: lowercase, with
// either scheme's default port removed (what remains is the same under
// both schemes).
func foldHost(host string) string {
	return cachekey.Host(cachekey.Host(host, "http"), "https")
}
