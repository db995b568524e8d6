// Package store owns the sidecar's layered cache: L1 (in-process, package
// l1) in front of an optional L2 (Redis, package l2), behind the three
// methods the proxy needs (Get, Set, Delete) plus what cluster-wide
// coalescing and warm start need (SetShared, TryLead, GetNewer,
// WarmStart).
//
// What it decides, and why (DESIGN.md "Request path" 4 and 8, "Failure
// semantics"):
//
//   - Lookups go to L1, then to L2; an L2 hit is promoted into L1 as it is.
//     An entry carries its own times (response time, initial age,
//     lifetime, stale windows), so a promoted entry keeps exactly the
//     lifetime it has left.
//   - Stores go to L1 at once and to L2 off the request path, through a
//     bounded queue drained by a few writers in pipelined batches. A full
//     queue drops the write and counts it: a client never waits for Redis
//     to store a response.
//   - An entry lives in L2 as long as it can be of use: to the end of its
//     longest stale window (stale-while-revalidate, stale-if-error, or the
//     tier's stale-if-unreachable window it was stored with), plus a
//     revalidation grace for responses with a validator, which can still
//     be refreshed with a conditional request. Keeping an entry longer
//     never makes it fresh: the proxy decides freshness from its times.
//   - A circuit breaker stands between every L2 call and Redis. After a few
//     consecutive failures (timeouts, refused connections, …) it opens:
//     requests are served from L1 and the origin without waiting on Redis
//     at all, and queued writes are dropped. After a while one probe call
//     is let through, and its outcome closes the breaker or keeps it open
//     for twice as long.
//   - An entry whose body is in a file (entry.File) reaches L2 only with
//     its body, chunk by chunk, before the entry (SetWithBody,
//     SetSharedWithBody; body.go), through a queue of its own that holds
//     no body; a replica copies such a body back with ReadBody.
//   - Deletes (purges, invalidations) are synchronous in both layers, and
//     cancel any write of the key still queued: a purge is never undone by
//     a write that was queued before it.
//   - Soft purges (expire.go; l1.ExpireMatching, Local.ExpireMatching)
//     rewrite entries instead of deleting them, with their freshness
//     ended at the purge (entry.Entry.Expire), so that the proxy treats
//     them as stale without any change to how it reads them. L2 entries
//     are written back only over the value read, for what is left of
//     their use (deleted when nothing is).
//
// The writers are owned by the Layered store and stop when its context
// ends or Close is called. L1 and L2 themselves belong to the caller.
package store
