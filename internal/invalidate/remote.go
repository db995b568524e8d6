package invalidate

import (
	"context"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
)

// Remote is the shared tier and the channel to the tier's other sidecars
// (L2 over Redis). Every method that takes a ctx is bounded by it.
type Remote interface {
	// Purge applies a purge in mode to the L2 entries sel names and
	// reports how many stored responses it removed or, soft, marked.
	Purge(ctx context.Context, sel Selector, mode Mode) (int, error)
	// Forget drops this sidecar's L2 writes that are still queued for
	// what sel names (and deletes again those already on their way once
	// they land), so that a fill stored just before an invalidation cannot
	// put the key back into L2 after it was deleted. Only exact keys are
	// known before the write lands: any other selector drops every queued
	// write.
	Forget(sel Selector)
	// Publish sends a sealed message on the tier's channel.
	Publish(ctx context.Context, msg []byte) error
	// NextSeq takes the next number of the tier's invalidation sequence,
	// for a message about to be published.
	NextSeq(ctx context.Context) (uint64, error)
	// Seq reads the number of the last message published; existed is
	// false when the counter was missing (and has been started anew).
	Seq(ctx context.Context) (n uint64, existed bool, err error)
}

// Kind is how a Selector finds L2 entries.
type Kind uint8

const (
	// SelectKeys names exact keys (the primary keys of absolute URLs).
	SelectKeys Kind = iota
	// SelectTags names the entries stored with any of the tags (the
	// tags' sets in L2).
	SelectTags
	// SelectAll names every entry of the tier, read by a scan: a purge
	// of everything, or, narrowed by Match, of a prefix or of URLs whose
	// keys cannot be computed.
	SelectAll
)

// Selector names the L2 entries a purge concerns: Values are the keys or
// tags of Kind (none for SelectAll), narrowed by Match when it is set.
type Selector struct {
	Kind   Kind
	Values []string
	// Match, when set, keeps only the entries it accepts; nil accepts
	// every entry found. It is called from one goroutine at a time; e is
	// valid only during the call.
	//
	// In a soft purge, Match sees every entry found, Vary markers
	// included, so that it can follow markers and count each key once.
	// In a hard purge of keys or tags, a Match makes the purge read
	// before it deletes (a repeat's condition, repeat.go): each entry is
	// deleted only if it is still the value Match saw, and a value that is
	// not an entry this sidecar reads is deleted as the first purge
	// deleted it; without a Match the keys are deleted unread.
	Match func(key string, e *entry.Entry) bool
}

// Mode is how a purge treats what it names: the zero Mode removes it (a
// hard purge), Soft marks it stale as of At.
//
// Soft purges (Request.Soft) mark what a purge names stale instead of
// removing it, as Varnish's soft purge does: from the purge on, a marked
// response is served only within its stale windows (stale-while-
// revalidate, while one background refresh runs; stale-if-error when the
// origin fails) and validated or fetched again otherwise, exactly as an
// entry whose freshness lifetime just ended. The stores do the marking
// (entry.Entry.Expire rewrites the stored entry with its lifetime ended
// at the purge, keeping its validators, so that a 304 renews it): the
// proxy's hit path reads entries as it always did and changes in nothing.
//
// Everything else is a hard purge's, on the same path (apply.go): the
// same requests (by URL, prefix, tag or all), authorization and rate
// limit, marks on the fills in progress (a fill that began before the
// purge is served but not stored), dropped queued L2 writes, L2 before
// L1, the fan-out to the tier's other sidecars, which mark their L1, and
// the repeat.
type Mode struct {
	Soft bool
	// At is when a soft purge is made: the stored responses requested
	// before it are marked stale as of it. A hard purge ignores it.
	At time.Time
}

// mode is the Mode of r made at at.
func (r Request) mode(at time.Time) Mode {
	if !r.Soft {
		return Mode{}
	}
	return Mode{Soft: true, At: at}
}
