// Package invalidate owns removing entries before their time: purges from
// the admin API (by URL, path prefix or tag, hard or soft) and the
// invalidations that unsafe requests cause (RFC 9111 §4.4). A soft purge
// (Mode) ends the freshness of what it names instead of removing it.
// It also knows the fills in progress (Watches), so that a fill of a
// resource that is purged or invalidated while it runs is served but
// never stored after it, while fills of every other resource are stored
// as usual.
//
// With a Remote (L2), purges are cluster-wide: they delete from Redis and
// are published on the tier's channel so that every sidecar of the tier
// drops its L1 copies. Without L2, a relay (SetRelay: the control plane's
// invalidation relay) carries the same messages to the tier's other
// sidecars. With the tier's invalidation key (Auth, auth.go)
// those messages are signed, and only signed, recent, unreplayed ones are
// applied, so that a client that can publish on the channel cannot empty
// every sidecar's L1.
package invalidate

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/originview"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Local is the store a Purger removes entries from: this sidecar's L1.
type Local interface {
	Delete(key string)
	// PurgeIf deletes the entry under key when match selects it (a
	// repeat's condition, repeat.go) and reports whether it did.
	PurgeIf(key string, match func(e *entry.Entry) bool) bool
	DeleteMatching(match func(e *entry.Entry) bool) int
	// ExpireMatching applies a soft purge made at at to the entries match
	// selects (entry.Entry.Expire) and returns how many stored responses
	// it concerned.
	ExpireMatching(at time.Time, match func(e *entry.Entry) bool) int
	Reset()
}

// Purger removes entries and tells the fills in progress that they were
// overtaken.
type Purger struct {
	local  Local
	remote Remote // nil: this sidecar only
	// relayOnly: remote is a channel without a shared store (SetRelay).
	relayOnly bool
	id        string // this sidecar's id in published messages
	log       *slog.Logger
	// remoteTimeout bounds the L2 work an unsafe request waits for.
	remoteTimeout time.Duration
	cfg           *tierconfig.Holder
	watches       *Watches
	subscribed    atomic.Bool
	// seqs follows the numbers of the messages received, to tell at a
	// resubscription whether one was missed.
	seqs seqs
	// auth signs published messages and checks received ones.
	auth *channelAuth
	// clock is the time purges are made at (a soft purge marks as of
	// it) and the delay of their repeats runs on (repeat.go); tests
	// inject a fake one.
	clock clock.WithDelayedExecution
	// OnPurge, when set, is called after every purge or invalidation (for
	// metrics), not after their repeats.
	OnPurge func()
	// OnRepeatDropped, when set, is called for every invalidation not
	// repeated because too many repeats were pending (maxRepeats).
	OnRepeatDropped func()
	// again repeats cluster-wide purges and invalidations (repeat.go).
	again repeats
}

// NewPurger returns a Purger over local, shaping URLs with the tier config
// in effect.
func NewPurger(local Local, cfg *tierconfig.Holder) *Purger {
	return &Purger{local: local, cfg: cfg, log: slog.Default(), watches: NewWatches(), auth: newChannelAuth(Auth{}), clock: clock.RealClock{},
		again: repeats{after: RepeatAfter, budget: closeTimeout}}
}

// SetAuth authenticates the channel: published messages are signed with
// a.Keys, and received ones are applied only when signed by a valid key,
// recent and not seen before. Call it before serving.
func (p *Purger) SetAuth(a Auth) { p.auth = newChannelAuth(a) }

// UseWatches makes the purger mark the fills registered in ws (shared by
// every purger of a sidecar) instead of its own. Call it before serving.
func (p *Purger) UseWatches(ws *Watches) { p.watches = ws }

// Watch registers a fill of host (as received) and target (path?query as
// keyed) that is about to start; see Watches. The caller must End it.
func (p *Purger) Watch(host, target string) *Watch { return p.watches.Begin(host, target) }

// SetRemote makes purges cluster-wide: they also delete from remote and
// are published to the tier's other sidecars, which apply them to their L1
// (HandleMessage). id tells this sidecar's own messages apart; timeout
// bounds the remote work of an unsafe-method invalidation. Call it before
// serving.
func (p *Purger) SetRemote(r Remote, id string, timeout time.Duration, log *slog.Logger) {
	if r != nil {
		p.remote = r
	}
	p.id, p.remoteTimeout = id, timeout
	if log != nil {
		p.log = log
	}
}

// SetRelay makes purges reach the tier's other sidecars through r, a
// channel without a shared store (the control plane's relay, for a tier
// without L2): every purge and invalidation is published, sealed as on
// L2's channel, and the others apply it to their L1 (HandleMessage).
// r's Purge and Forget are never called, results carry no L2 count, and
// nothing is repeated: a repeat clears copies that a fill read from L2
// around the purge, and without L2 every fill reads the origin, which a
// fill in progress when the message arrives is not stored from (Watches).
// Call it before serving, instead of SetRemote.
func (p *Purger) SetRelay(r Remote, id string, log *slog.Logger) {
	p.SetRemote(r, id, 0, log)
	p.relayOnly = r != nil
}

// shared reports whether purges go to a shared store (L2) too.
func (p *Purger) shared() bool { return p.remote != nil && !p.relayOnly }

// Invalidate removes every variant of each absolute URL: the exact primary
// keys when the URL's rule keys only on host and target, else by matching
// entries. It is what unsafe requests trigger, so the common case does no
// scan. With a Remote, the keys also go from L2 and the other sidecars are
// told.
//
// Order matters: fills in progress are marked first, this sidecar's queued
// L2 writes of the keys dropped, then L2 is cleared before L1, so that a
// request that misses L1 meanwhile cannot read the old L2 copy after the
// L1 delete and copy it back (the store skips promoting what it read
// while L1 entries were being removed).
//
// With a Remote it is repeated after RepeatAfter (repeat.go).
func (p *Purger) Invalidate(ctx context.Context, urls []*url.URL) {
	at := p.clock.Now()
	p.invalidate(ctx, urls, time.Time{})
	if p.shared() {
		p.repeatInvalidate(urls, at.Add(repeatMargin))
	}
	p.purged()
}

// invalidate applies Invalidate; with before set it is Invalidate's
// repeat, which removes only what was requested before before.
func (p *Purger) invalidate(ctx context.Context, urls []*url.URL, before time.Time) {
	var keys []string
	if before.IsZero() {
		keys = p.markInvalidated(urls)
	} else {
		keys = p.primaryKeys(urls)
	}
	if p.shared() {
		ctx, cancel := context.WithTimeout(ctx, p.remoteTimeout)
		defer cancel()
		if len(keys) > 0 {
			if _, err := p.remote.Purge(ctx, Selector{Kind: SelectKeys, Values: keys, Match: requestedBefore(before)}, Mode{}); err != nil {
				p.log.Warn("invalidation: deleting from l2 failed", "err", err, "repeat", !before.IsZero())
			}
		}
	}
	p.deleteLocal(keys, before)
	if p.remote != nil {
		raw := make([]string, len(urls))
		for i, u := range urls {
			raw[i] = u.String()
		}
		p.publish(ctx, message{Invalidate: raw, Repeat: !before.IsZero(), Before: before})
	}
}

// deleteLocal deletes keys from this sidecar's L1, with before set only
// what was requested before it.
func (p *Purger) deleteLocal(keys []string, before time.Time) {
	for _, k := range keys {
		if before.IsZero() {
			p.local.Delete(k)
		} else {
			p.local.PurgeIf(k, func(e *entry.Entry) bool { return older(e, before) })
		}
	}
}

// markInvalidated marks the fills in progress that urls concern, drops
// this sidecar's queued L2 writes of their keys, and returns the exact
// keys to delete. Every variant of a URL (Vary, or request headers and
// cookies its rule keys on) hangs off a marker under the URL's primary
// key, so deleting the primary keys retires them all without a scan.
func (p *Purger) markInvalidated(urls []*url.URL) []string {
	cfg := p.cfg.Load()
	refs := make([]ref, 0, len(urls))
	for _, u := range urls {
		refs = append(refs, p.refOf(cfg, u.Host, u.EscapedPath(), u.RawQuery))
	}
	p.watches.mark(refs, "", nil, false)
	all := p.primaryKeys(urls)
	if p.shared() {
		p.remote.Forget(Selector{Kind: SelectKeys, Values: all})
	}
	return all
}

// primaryKeys returns the primary keys of urls.
func (p *Purger) primaryKeys(urls []*url.URL) []string {
	cfg := p.cfg.Load()
	var all []string
	for _, u := range urls {
		all = append(all, cachekey.PrimaryKeys(&cfg.StoredRule(u.Host, u.EscapedPath()).Key, u.Host, u.EscapedPath(), u.RawQuery)...)
	}
	return all
}

// Request is a purge: any combination of URLs, a path prefix and tags, or
// everything (All, alone), removed or, Soft, marked stale.
type Request struct {
	URLs   []string `json:"urls,omitempty"`
	Prefix string   `json:"prefix,omitempty"`
	Tags   []string `json:"tags,omitempty"`
	// All purges every entry of the tier. It must be given alone: a purge
	// that empties the cache is never the side effect of a short prefix.
	All bool `json:"all,omitempty"`
	// Soft marks what the purge names stale instead of removing it
	// (Mode). Sidecars of a version before soft purges ignore the
	// field in a published message and remove: safe, never nothing.
	Soft bool `json:"soft,omitempty"`
}

// Result is the answer to a purge: how many stored responses each layer
// removed, or with Soft marked stale (every variant counts). L1 counts
// this sidecar's L1; L2 the shared Redis (nil without L2); Bodies the
// files of this sidecar's body store (0 without one): a response whose
// body is a file counts in L1 and in Bodies while L1 holds its entry, in
// Bodies only once L1 let it go. Purged is the most responses one layer
// counted, a response known only by its body file counting with L1.
type Result struct {
	Purged int  `json:"purged"`
	L1     int  `json:"l1"`
	L2     *int `json:"l2,omitempty"`
	Bodies int  `json:"bodies"`
	Soft   bool `json:"soft"`
}

// Purge removes what r names, here and (with a Remote) in L2 and on every
// other sidecar of the tier. r must have passed Validate. An error means
// the shared part failed; the local part has been applied regardless.
// As Invalidate does, it marks the fills in progress first and clears L2
// before L1.
//
// A soft purge (r.Soft) is made at the time it starts: the stored
// responses requested before then are marked stale (entry.Entry.Expire),
// and fills in progress are not stored, as for a hard purge: they began
// before the purge, so what they fetch may be what it marks.
//
// With a Remote it is repeated after RepeatAfter (repeat.go).
func (p *Purger) Purge(ctx context.Context, r Request) (Result, error) {
	at := p.clock.Now()
	res, err := p.purge(ctx, r, at, time.Time{})
	if p.shared() {
		p.repeatPurge(r, at.Add(repeatMargin))
	}
	p.purged()
	return res, err
}

// purge applies Purge made at at. With before set it is Purge's repeat:
// it removes (or, soft, marks as of before) only what was requested
// before before, and marks no fill and drops no queued write.
func (p *Purger) purge(ctx context.Context, r Request, at, before time.Time) (Result, error) {
	var refs []ref
	if before.IsZero() {
		refs = p.markPurged(r)
	} else {
		refs, at = p.refsOf(p.cfg.Load(), r.URLs), before
	}
	m := r.mode(at)
	res := Result{Soft: m.Soft}
	var err error
	if p.shared() {
		var n2 int
		n2, err = p.purgeRemote(ctx, r, m, before)
		res.L2 = &n2
	}
	l := p.purgeLocal(r, refs, m, before)
	res.L1, res.Bodies, res.Purged = l.responses, l.files, l.responses+l.filesOnly
	if res.L2 != nil {
		res.Purged = max(res.Purged, *res.L2)
	}
	if p.remote != nil {
		p.publish(ctx, message{Request: r, Repeat: !before.IsZero(), Before: before})
	}
	return res, err
}

// markPurged marks the fills in progress that r concerns and drops this
// sidecar's queued L2 writes; it returns r's URLs as references.
func (p *Purger) markPurged(r Request) []ref {
	refs := p.refsOf(p.cfg.Load(), r.URLs)
	p.watches.mark(refs, r.Prefix, r.Tags, r.All)
	if p.shared() {
		// Which queued writes a prefix, a tag or an any-host URL covers
		// is not known here; purges are rare: drop them all.
		p.remote.Forget(Selector{Kind: SelectAll})
	}
	return refs
}

// message is what sidecars of a tier tell each other.
type message struct {
	From string `json:"from"`
	// Seq is the message's number in the tier's sequence (0: none).
	Seq uint64 `json:"seq,omitempty"`
	Request
	// Invalidate lists absolute URLs changed by unsafe requests.
	Invalidate []string `json:"invalidate,omitempty"`
	// Repeat marks a purge or invalidation applied again (RepeatAfter):
	// it is not counted again.
	Repeat bool `json:"repeat,omitempty"`
	// Before, on a repeat, limits it to what was requested before this
	// time (the sender's clock, repeatMargin added): entries fetched
	// after the purge are kept, no fill is marked and no queued write
	// dropped (repeat.go). A repeat without it (a sidecar of an earlier
	// version) is applied as the first time.
	Before time.Time `json:"before,omitzero"`
}

func (p *Purger) publish(ctx context.Context, m message) {
	m.From = p.id
	if n, err := p.remote.NextSeq(ctx); err != nil {
		p.log.Warn("numbering an invalidation failed; it goes out unnumbered, and other sidecars clear their L1 at their next resubscriptions", "err", err)
	} else {
		m.Seq = n
		p.seqs.saw(n)
	}
	b, err := json.Marshal(m)
	if err == nil {
		b, err = p.auth.seal(b)
	}
	if err != nil {
		p.log.Warn("invalidation not published: sealing it failed; other sidecars keep their copies until the entries expire", "err", err)
		return
	}
	if err := p.remote.Publish(ctx, b); err != nil {
		p.log.Warn("publishing an invalidation failed; other sidecars keep their copies until they resubscribe or the entries expire", "err", err)
	}
}

// HandleMessage applies a purge or invalidation published by another
// sidecar of the tier to this sidecar's L1. Its own messages are ignored;
// malformed ones, and with an invalidation key unsigned, forged, stale
// and replayed ones, are refused (counted, and logged at most once a
// minute).
func (p *Purger) HandleMessage(b []byte) {
	body, reason := p.auth.open(b)
	var m message
	if reason == "" && json.Unmarshal(body, &m) != nil {
		reason = RejectMalformed
	}
	if reason != "" {
		if logNow, suppressed := p.auth.rejected(reason); logNow {
			p.log.Warn("invalidation message refused", "reason", reason,
				"authenticated", p.auth.Keys.Enabled(), "refused_since_last_log", suppressed)
		}
		return
	}
	if m.Seq != 0 {
		p.seqs.saw(m.Seq)
	} else {
		p.seqs.sawUnsequenced(p.auth.Now())
	}
	if m.From == p.id {
		return
	}
	// A repeat limited to what was requested before m.Before, on the
	// sender's clock, never clamped to ours: the copies here carry the
	// clock of whichever replica fetched them (promoted from L2), so a
	// limit cut to our now, when our clock runs behind, kept what another
	// replica requested before the purge. A limit however far ahead takes
	// no more than a repeat without one.
	var before time.Time
	if m.Repeat && !m.Before.IsZero() {
		before = m.Before
	}
	if len(m.Invalidate) > 0 {
		urls := make([]*url.URL, 0, len(m.Invalidate))
		for _, raw := range m.Invalidate {
			if u, err := url.Parse(raw); err == nil && u.Host != "" {
				urls = append(urls, u)
			}
		}
		// The sender cleared L2 before publishing.
		if before.IsZero() {
			p.deleteLocal(p.markInvalidated(urls), before)
		} else {
			p.deleteLocal(p.primaryKeys(urls), before)
		}
	}
	if len(m.URLs) > 0 || m.Prefix != "" || len(m.Tags) > 0 || m.All {
		if m.Request.Validate() == nil {
			// A soft purge is marked at its arrival here: the sender's
			// clock may differ, and marking a little more is safe.
			if before.IsZero() {
				p.purgeLocal(m.Request, p.markPurged(m.Request), m.mode(p.clock.Now()), before)
			} else {
				p.purgeLocal(m.Request, p.refsOf(p.cfg.Load(), m.URLs), m.mode(before), before)
			}
		}
	}
	if !m.Repeat {
		p.purged()
	}
}

// Subscribed is called after every (re)subscription to the tier's
// channel, with the time just before it was asked for. Messages sent
// while this sidecar was not subscribed are lost, so after a
// resubscription it reads the tier's sequence counter: when messages may
// have been published meanwhile (the counter moved, went missing, or
// cannot be read; see seqs), it drops its whole L1 and its queued L2
// writes: whatever was purged meanwhile cannot be served from here nor
// written back to L2 by it, and the entries that were not come back from
// L2. A resubscription with nothing published meanwhile
// (Redis dropped the connection, say over an oversized message on the
// channel) keeps L1. The first subscription (at start) drops nothing.
// Signed messages from before since are refused as replays.
func (p *Purger) Subscribed(ctx context.Context, since time.Time) {
	p.auth.subscribed(since)
	var counter uint64
	var existed, read bool
	if p.remote != nil {
		ctx, cancel := context.WithTimeout(ctx, max(p.remoteTimeout, minSeqTimeout))
		var err error
		counter, existed, err = p.remote.Seq(ctx)
		cancel()
		if err != nil {
			p.log.Warn("reading the invalidation sequence failed", "err", err)
		}
		read = err == nil
	}
	missed := p.seqs.subscribed(counter, existed, read, p.auth.Now())
	if !p.subscribed.Swap(true) {
		return
	}
	if !missed {
		p.log.Info("resubscribed to invalidations; none was published meanwhile, L1 kept", "sequence", counter)
		return
	}
	p.watches.mark(nil, "", nil, true)
	// As a purge's message would have: the L2 writes queued here of what
	// a missed purge named must not land after its repeat, which drops
	// no queued write.
	if p.shared() {
		p.remote.Forget(Selector{Kind: SelectAll})
	}
	p.local.Reset()
	p.log.Info("resubscribed to invalidations; L1 cleared, messages may have been missed")
}

// minSeqTimeout bounds reading the sequence at a subscription from below:
// it is not on a request's path, and a timeout costs the whole L1.
const minSeqTimeout = time.Second

func (p *Purger) purged() {
	if p.OnPurge != nil {
		p.OnPurge()
	}
}

// ref names a resource: a host (empty: any host) and a target as keyed.
type ref struct{ host, target string }

func (p *Purger) refOf(cfg *tierconfig.Compiled, host, escapedPath, rawQuery string) ref {
	target := string(cachekey.AppendTarget(nil, &cfg.StoredRule(host, escapedPath).Key, escapedPath, rawQuery))
	r := ref{target: target}
	if host != "" {
		// Both schemes' default ports fold away; what remains is the same
		// under either scheme.
		r.host = cachekey.Host(cachekey.Host(host, "http"), "https")
	}
	return r
}

func (p *Purger) refsOf(cfg *tierconfig.Compiled, urls []string) []ref {
	refs := make([]ref, 0, len(urls))
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			continue // Validate refuses these
		}
		refs = append(refs, p.refOf(cfg, u.Host, u.EscapedPath(), u.RawQuery))
	}
	return refs
}

func matches(e *entry.Entry, refs []ref, prefix string, tags map[string]struct{}) bool {
	return matchesAny(e, refs) || (prefix != "" && underPrefix(e.Target, prefix)) || hasTag(e, tags)
}

// underPrefix reports whether a purge by prefix covers target (path?query
// as keyed): the target starts with it, or some reading of its path does
// (originview.HasPrefix: "/a/..%2fstatic/x" is "/static/x" to an origin
// that decodes and cleans, and a purge of "/static/" must not leave it).
func underPrefix(target, prefix string) bool {
	if strings.HasPrefix(target, prefix) {
		return true
	}
	path, _, _ := strings.Cut(target, "?")
	return originview.HasPrefix(path, prefix)
}

func matchesAny(e *entry.Entry, refs []ref) bool {
	for _, r := range refs {
		if e.Target == r.target && (r.host == "" || r.host == e.Host) {
			return true
		}
	}
	return false
}

func tagSet(tags []string) map[string]struct{} {
	m := make(map[string]struct{}, len(tags))
	for _, t := range tags {
		m[t] = struct{}{}
	}
	return m
}

func hasTag(e *entry.Entry, tags map[string]struct{}) bool {
	if len(tags) == 0 {
		return false
	}
	for _, t := range e.Tags {
		if _, ok := tags[t]; ok {
			return true
		}
	}
	return false
}
