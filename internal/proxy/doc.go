// Package proxy is the sidecar's HTTP handler: the request path of
// DESIGN.md. It asks internal/httpcache for every caching rule and
// internal/cachekey for every key, keeps entries in a Store (L1, or L1+L2),
// collapses concurrent misses for one key into one origin fetch (across
// replicas too), streams origin bodies to the client as they arrive, and
// serves stale content when the rules allow it.
//
// # One miss, in reading order
//
//   - proxy.go: ServeHTTP refuses what the cache cannot handle safely,
//     matches the tier's rule and sends GET and HEAD to serveCacheable.
//   - serve.go: serveCacheable builds the keys, looks them up
//     (lookup.go), serves a fresh or stale hit (or a part, partial.go),
//     and routes a miss as httpcache.RouteMiss says: passed (pass.go), a
//     HEAD update (head.go), a range, or a fill, collapsed (coalesce)
//     unless the request must fetch alone.
//   - flight.go: coalesce joins or leads the key's flight; the leader
//     looks again (a fill may have landed since the miss), takes the
//     tier-wide lease or waits for the replica that holds it, then fills.
//     A flight ends once, through its lead. Waiters (wait) serve what the
//     lead published or follow the body file as it grows. A stale hit's
//     background refresh is a flight too (refresh).
//   - fill.go: fill asks the origin (fillRequest, origin.go), decides
//     whether to store (httpcache.Decide), answers the client while it
//     collects the body, stores it (keep: L1, L2, Vary placement) and
//     publishes it before the client has its last byte. Large bodies go
//     to a body file (fillfile.go, fillfeed.go, l2bodies.go); 304s
//     revalidate (revalidated); parts of ranges go to partial.go and
//     partialfile.go.
//   - timeouts.go bounds every origin exchange; cachestatus.go, debug.go
//     and targeted.go shape what the client is told.
package proxy
