// Package proxy is the sidecar's HTTP handler: the request path of
// DESIGN.md. It asks internal/httpcache for every caching rule and
// internal/cachekey for every key, keeps entries in a Store (L1, or L1+L2),
// collapses concurrent misses for one key into one origin fetch
// (internal/coalesce, across replicas too), streams origin bodies to the
// client as they arrive, and serves stale content when the rules allow it.
//
// # One miss, in reading order
//
//   - proxy.go: ServeHTTP refuses what the cache cannot handle safely,
//     matches the tier's rule and sends GET and HEAD to serveCacheable.
//   - serve.go: serveCacheable builds the keys and looks them up
//     (lookup.go) into a cacheReq; serveStored serves a fresh or stale
//     hit; serveMiss routes the miss as httpcache.RouteMiss says: passed
//     (pass.go), a HEAD update (head.go), or a fill, collapsed (coalesce)
//     unless it must fetch alone. A stored part of the representation
//     takes one branch, servePart (partial.go).
//   - flight.go: coalesce joins or leads the key's flight; the leader
//     looks again (a fill may have landed since the miss), takes the
//     tier-wide lease or waits for the replica that holds it, then fills.
//     Waiters (wait) serve what the lead published or follow the body
//     file as it grows. A stale hit's background refresh is a flight too.
//   - fill.go: a fill is one fetch value and its phases: ask the origin
//     (fillRequest, origin.go; bound by timeouts.go), answer aside what
//     is not decided (a stale stand-in, stale.go; a range's answer,
//     partial.go; a 304 that revalidates), decide (httpcache.Decide),
//     answer the header, then pass on an uncacheable body or collect it
//     while the client is answered (fillclient.go) and keep it.
//   - keep.go: keep stores the response where place says (its key, or
//     behind a Vary marker) and publishes it to the flight's waiters
//     before the client has its last byte. Large bodies go to a body file
//     instead (fillfile.go, fillfeed.go, l2bodies.go).
//
// cachestatus.go, debug.go and targeted.go shape what the client is told.
package proxy
