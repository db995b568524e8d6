// Package bodystore keeps large response bodies as files in one directory
// (--body-dir), beside the L1/L2 entries that hold their headers,
// freshness and a reference (entry.BodyFile). A hit opens the file (or
// reuses the descriptor an earlier hit left open: handle.go), checks that
// it belongs to the key, and hands the proxy a *Section, which connguard's
// connection sends with sendfile from the section's offset when io.Copy
// hands it to the ResponseWriter: the kernel sends the body from the page
// cache. The waiters of a fill in progress follow the growing file
// (Writer.Follow); io.Copy from a Follower uses sendfile as well.
//
// It is hand-written because no well-kept Go library does what this needs
// together: a crash-safe, budgeted file cache whose bodies can be read by
// followers while they are being written and served with sendfile. The
// parts are small: a flat directory, an in-memory LRU index, a writer that
// renames into place, and a verifying scan at start.
//
// # Files
//
// One file per body, named <hex id>.body (<hex id>.tmp while it is being
// written). The id is random and never reused, so a file of a replaced or
// purged body is never taken for the current one.
//
//	header   64 bytes: "TCB\x01" | id (16) | sha256(cache key) (32) |
//	         body offset u32 LE = 64 | reserved (8, zero)
//	body     the bytes, as received
//	trailer  written at commit: key length u32 LE | key | encoded entry
//	         (version 2, the value L1 holds) | trailer length u32 LE
//	         (the whole trailer, these 20 fixed bytes included) |
//	         body size u64 LE | body CRC-32C u32 LE | "TCBE"
//
// The key is in the trailer so that a restart can give the proxy back the
// exact cache key to re-insert the entry under (Recovered).
//
// A piece file holds one part (206) of a large representation, one file
// per stored part (docs/caching.md "Partial content"). Its trailer's
// entry is the version 4 partial entry of that part alone (one piece, the
// whole body of this file), never a version 2 one: no reader, this
// sidecar's or an older one's (which reads version 4 as a miss), can take
// a piece for the complete body of its key. Pieces are write-once,
// checksummed and committed by rename like every body, so a part is never
// read half-written; a file per part rather than one sparse file mutated
// in place keeps those guarantees without per-span checksums.
//
// # Decisions
//
//   - Budget: committed file bytes (header, body and trailer) plus the
//     reservations of writers in progress never exceed Options.MaxBytes.
//     A writer with a size hint reserves header + hint up front; without
//     one it reserves in 1 MiB steps as it writes; the trailer is reserved
//     at Commit and the reservation is trued up to the file's real size.
//     Room is made by evicting committed files, least recently used first
//     (Open counts as a use); files being written are never evicted.
//     Nothing is evicted or reserved for a writer before its temp file
//     exists: a Create that cannot create it (EMFILE under a flood of
//     connections) leaves the store as it was, and one whose file exists
//     but whose budget cannot be met removes the file (ErrFull).
//     MaxBytes 0 means 90% of the space available at start (what the
//     filesystem reports free plus what the recovered files hold).
//   - Eviction and Remove unlink: readers with an open fd keep reading.
//     Evicting a file whose entry is still in L1 is fine: Open then fails
//     with an error matching fs.ErrNotExist and the proxy treats it as a
//     miss.
//   - Files deleted under the store: Open fails with fs.ErrNotExist and
//     the index forgets the file (its bytes leave the budget); eviction of
//     a file that is already gone frees its accounting just the same. The
//     index can only over-count, which evicts early but never blocks new
//     files for good.
//   - Open checks the header (magic, id, sha256 of the key), the file's
//     size and what its trailer records (body size and CRC equal to the
//     reference's), never the CRC over the body (that is the restart
//     scan's job). The index keeps, for every file the store committed or
//     recovered, its size and what its trailer records, so the first hit
//     on a file costs open, fstat and a pread of the header before
//     sendfile; only a file the index does not know (its Remove is under
//     way) costs a pread of the trailer. A file that is not ours or
//     is damaged (bad magic, wrong id, a size other than when it was
//     committed) is removed; a file that is intact but belongs to another
//     key or another reference is left alone (it is valid for its own
//     entry) and not served.
//   - Descriptors: a file served once keeps its descriptor open for the
//     next hits (handle.go), up to Options.MaxOpen files (default 1024,
//     at most a quarter of the limit on open files), least recently
//     served dropped first, the way nginx's open_file_cache keeps them.
//     A hit on a kept descriptor costs an fstat: a file unlinked under
//     the store or resized is dropped and opened again by path, which
//     reports it gone or damaged as above. A change that keeps the size
//     (bytes rewritten in place) is not seen by such a hit, as a hit never
//     sees a change to the body's bytes: the CRC is the restart scan's.
//     Descriptors are counted, so one is closed only when the last
//     request reading it is done: a closed number reused by the next open
//     would send another file's bytes (TestHitsNeverReadAnotherBodyUnderChurn).
//     A kept descriptor holds its own copy of the key its file's header
//     was checked against: the proxy's keys alias pooled buffers that the
//     next request overwrites, and a hit on a kept descriptor is only
//     checked against that key.
//   - A write error (ENOSPC, EIO, EFBIG, budget) breaks the writer: every
//     later Write and Commit returns it, followers get it; Abort (or the
//     failed Commit itself) removes the temp file and releases the
//     reservation. A failed Commit leaves nothing behind, so Abort after it
//     is a no-op, as is Abort after a successful Commit.
//   - Commit refuses a length different from the size hint (a truncated
//     body or a Content-Length that lies either way; the lie in excess is
//     caught at the Write that crosses the hint) and an entry from meta
//     that does not decode as a version 2 entry of this very body.
//   - Piece files are removed at restart without being verified: the
//     partial entries that listed them lived in L1 only, which is empty
//     after a restart, so they are orphans (and returning one would let
//     the caller put a piece back as a complete response). A soft purge
//     leaves them alone (nothing comes back to mark); purges and
//     RemoveKey remove them like any body (RemoveMatching shows them as
//     KindPartial).
//   - Restart (Open): *.tmp files are removed; every *.body is verified
//     in full (header, trailer, key hash, entry, CRC-32C streamed over the
//     body in O(buffer) memory); the invalid ones are removed and counted
//     (body_store_errors_total{op="recover"}). Other files are ours to
//     leave alone: they are logged once and never deleted. The valid
//     files enter the LRU in modification-time order; past the budget the
//     oldest are evicted. Of two files for one key (a replaced body whose
//     Remove a crash lost) only the newer is kept. The caller re-inserts
//     the returned entries into L1 and Removes the ones it does not want.
//     So a body whose entry is purged or replaced must be Removed: a file
//     left behind comes back at the next start.
//   - Purges find files without L1 (index.go): every committed file is
//     indexed by hashes of its key and of its primary key, and by its
//     entry's Host, Target and Tags (copied from the entry in the trailer
//     at Commit and at the restart scan). RemoveKey deletes the body
//     stored under a key (under a primary key, its variants' too: deleting
//     the primary key retires them); RemoveMatching deletes the bodies
//     whose identity a purge's match selects. So a purge removes the file
//     of an entry L1 has already evicted, which would otherwise come back
//     at the next start. The index costs a few hundred bytes per file.
//   - An unwritable directory at start is an error naming --body-dir, the
//     path and the OS reason; writability is proven by creating a probe
//     file, since permission bits do not stop root.
//
// Errors that are expected outcomes are sentinels: ErrTooLarge, ErrFull,
// ErrExists, ErrMismatch, ErrLength, ErrAborted, ErrClosed.
package bodystore
