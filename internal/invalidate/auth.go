package invalidate

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of the authenticated invalidation channel (docs/l2.md,
// "Authenticated invalidations").
const (
	// KeyGrace is how long the key a rotation replaced still signs (next
	// to the new one) and verifies: replicas see a rotated Secret at
	// different moments (the kubelet refreshes projected volumes within a
	// minute or two), and during the grace period each side accepts what
	// the other signs.
	KeyGrace = 5 * time.Minute
	// MaxMessageAge is the oldest message accepted; older ones, and the
	// nonces of younger ones seen before, are refused as replays.
	MaxMessageAge = 2 * time.Minute
	// MaxClockSkew is how far in the future a message's timestamp may be.
	MaxClockSkew = 30 * time.Second
	// maxNonces bounds the nonces remembered within MaxMessageAge: with
	// more messages than this in the window, the oldest are forgotten
	// first (their replay is the only thing that gets through: an
	// invalidation applied twice).
	maxNonces = 1 << 17
	// maxMACs is the most MACs a message may carry: the current key's and,
	// during a grace period, the previous key's.
	maxMACs = 2
	// rejectLogInterval: rejections are logged at most this often.
	rejectLogInterval = time.Minute
	// macDomain separates these MACs from any other use of the key.
	macDomain = "tiercache/invalidation/v1"
)

// Reasons a message is rejected (label reason of
// tiercache_invalidations_rejected_total).
const (
	RejectMalformed = "malformed"
	RejectUnsigned  = "unsigned"
	RejectBadMAC    = "bad_mac"
	RejectExpired   = "expired"
	RejectFuture    = "future"
	RejectReplay    = "replay"
)

// RejectReasons lists every reason, for metrics that start at zero.
func RejectReasons() []string {
	return []string{RejectMalformed, RejectUnsigned, RejectBadMAC, RejectExpired, RejectFuture, RejectReplay}
}

// Keyring holds a tier's invalidation key and, for KeyGrace after a
// rotation, the key it replaced, and the nonces this sidecar has
// received. It is safe for concurrent use; every generation of a sidecar
// shares one, so that a message one generation received is a replay to
// the next (a new nonce set per generation would accept, after every
// data-plane rebuild, each signed message of the last MaxMessageAge once
// more).
type Keyring struct {
	st     atomic.Pointer[keyState]
	nonces nonceSet
	// receivers numbers the channelAuths that receive with this keyring.
	receivers atomic.Uint64
}

type keyState struct {
	current, previous []byte
	previousUntil     time.Time
}

// NewKeyring returns a keyring without a key: messages are neither signed
// nor verified.
func NewKeyring() *Keyring {
	k := &Keyring{nonces: nonceSet{max: maxNonces}}
	k.st.Store(&keyState{})
	return k
}

// Set makes key the current key as of now; the key it replaces stays
// valid until now+KeyGrace. An empty key turns authentication off at once
// (nothing to sign with, nothing required). Set reports whether the key
// changed. Callers serialise Set.
func (k *Keyring) Set(key []byte, now time.Time) bool {
	old := k.st.Load()
	if hmac.Equal(old.current, key) {
		return false
	}
	next := &keyState{current: append([]byte(nil), key...)}
	if len(key) > 0 && len(old.current) > 0 {
		next.previous, next.previousUntil = old.current, now.Add(KeyGrace)
	}
	k.st.Store(next)
	return true
}

// Enabled reports whether a key is set: messages are signed, and only
// signed ones are accepted.
func (k *Keyring) Enabled() bool { return k != nil && len(k.st.Load().current) > 0 }

// keys returns the keys valid at now, the current one first: none, one,
// or two during a grace period.
func (k *Keyring) keys(now time.Time) [][]byte {
	if k == nil {
		return nil
	}
	st := k.st.Load()
	if len(st.current) == 0 {
		return nil
	}
	if st.previous != nil && now.Before(st.previousUntil) {
		return [][]byte{st.current, st.previous}
	}
	return [][]byte{st.current}
}

// Auth authenticates a tier's invalidation channel.
type Auth struct {
	// Keys signs and verifies; nil or empty: messages go unsigned and
	// every well-formed one is accepted (the standalone demo).
	Keys *Keyring
	// Channel is the tier's channel name; MACs cover it, so a message is
	// valid on its own tier's channel only.
	Channel string
	// Now and Rand default to time.Now and crypto/rand.
	Now  func() time.Time
	Rand io.Reader
	// Rejected, when set, counts a rejected message by reason.
	Rejected func(reason string)
}

// sealed is a signed message on the channel. MACs are hex HMAC-SHA256 over
// macDomain, the channel, TS, Nonce and the exact bytes of Msg, one per
// valid key (the current key first).
type sealed struct {
	TS    int64           `json:"ts"` // Unix milliseconds
	Nonce string          `json:"nonce"`
	MACs  []string        `json:"macs"`
	Msg   json.RawMessage `json:"msg"`
}

// channelAuth is a Purger's state for Auth: which receiver it is, since
// when it is subscribed, and what it has logged. The nonces it has seen
// are the keyring's, shared with the sidecar's other generations.
type channelAuth struct {
	Auth
	// id tells this receiver apart in the keyring's nonce set.
	id uint64
	// since is the start of the current subscription: every message
	// delivered on it was published after since (zero before the first
	// subscription, which no message precedes).
	since atomic.Pointer[time.Time]

	logMu      sync.Mutex
	loggedAt   time.Time
	suppressed int
}

func newChannelAuth(a Auth) *channelAuth {
	if a.Now == nil {
		a.Now = time.Now
	}
	if a.Rand == nil {
		a.Rand = rand.Reader
	}
	c := &channelAuth{Auth: a}
	if a.Keys != nil {
		c.id = a.Keys.receivers.Add(1)
	}
	c.since.Store(&time.Time{})
	return c
}

// subscribed records the start of a (re)subscription.
func (a *channelAuth) subscribed(since time.Time) { a.since.Store(&since) }

// seal signs msg with every valid key; without a key it returns msg as
// it is.
func (a *channelAuth) seal(msg []byte) ([]byte, error) {
	now := a.Now()
	keys := a.Keys.keys(now)
	if len(keys) == 0 {
		return msg, nil
	}
	var n [16]byte
	if _, err := io.ReadFull(a.Rand, n[:]); err != nil {
		return nil, err
	}
	s := sealed{TS: now.UnixMilli(), Nonce: hex.EncodeToString(n[:]), Msg: msg}
	for _, k := range keys {
		s.MACs = append(s.MACs, hex.EncodeToString(mac(k, a.Channel, s.TS, s.Nonce, msg)))
	}
	return json.Marshal(s)
}

// open returns the message b carries, or the reason it is refused. With
// a key, only a message signed by a valid key, within its time window,
// whose nonce was not seen before is accepted. Without one, a signed
// message is accepted unverified and an unsigned one as it is.
func (a *channelAuth) open(b []byte) ([]byte, string) {
	var s sealed
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, RejectMalformed
	}
	now := a.Now()
	keys := a.Keys.keys(now)
	if len(keys) == 0 {
		if s.Msg != nil {
			return s.Msg, ""
		}
		return b, ""
	}
	if s.Msg == nil || len(s.MACs) == 0 {
		return nil, RejectUnsigned
	}
	if len(s.MACs) > maxMACs || len(s.Nonce) != 32 {
		return nil, RejectMalformed
	}
	if !a.verify(keys, s) {
		return nil, RejectBadMAC
	}
	ts := time.UnixMilli(s.TS)
	since := *a.since.Load()
	switch {
	case ts.Before(now.Add(-MaxMessageAge)):
		return nil, RejectExpired
	case ts.After(now.Add(MaxClockSkew)):
		return nil, RejectFuture
	case ts.Before(since.Add(-MaxClockSkew)):
		// Pub/sub delivers only what is published while subscribed: a
		// message signed before the subscription (give or take the
		// clocks' disagreement) is a replay, whatever this sidecar
		// remembers (after a restart, nothing).
		return nil, RejectReplay
	}
	// A nonce needs remembering only while its message is young enough
	// to be accepted.
	if !a.Keys.nonces.accept(s.Nonce, ts.Add(MaxMessageAge), now, a.id, since) {
		return nil, RejectReplay
	}
	return s.Msg, ""
}

// verify reports whether one of s's MACs is right under one of keys.
func (a *channelAuth) verify(keys [][]byte, s sealed) bool {
	for _, k := range keys {
		want := mac(k, a.Channel, s.TS, s.Nonce, s.Msg)
		for _, m := range s.MACs {
			got, err := hex.DecodeString(m)
			if err == nil && hmac.Equal(got, want) {
				return true
			}
		}
	}
	return false
}

func mac(key []byte, channel string, ts int64, nonce string, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	var buf [20]byte
	for _, part := range [][]byte{[]byte(macDomain), []byte(channel), strconv.AppendInt(buf[:0], ts, 10), []byte(nonce)} {
		h.Write(part)
		h.Write([]byte{0})
	}
	h.Write(msg)
	return h.Sum(nil)
}

// rejected counts a rejection and reports whether to log it now (at most
// once per rejectLogInterval) and how many rejections went unlogged
// before it.
func (a *channelAuth) rejected(reason string) (logNow bool, suppressed int) {
	if a.Rejected != nil {
		a.Rejected(reason)
	}
	now := a.Now()
	a.logMu.Lock()
	defer a.logMu.Unlock()
	if !a.loggedAt.IsZero() && now.Sub(a.loggedAt) < rejectLogInterval {
		a.suppressed++
		return false, 0
	}
	suppressed, a.suppressed, a.loggedAt = a.suppressed, 0, now
	return true, suppressed
}

// nonceSet remembers the nonces a sidecar has received until they expire,
// at most max of them (the oldest go first when full), with when each was
// first received and by which receivers (generations' subscriptions).
type nonceSet struct {
	max   int
	mu    sync.Mutex
	seen  map[string]*nonceSeen
	order []nonceExpiry // in arrival order from head
	head  int
}

type nonceSeen struct {
	first time.Time // when a receiver of this sidecar first got it
	by    []uint64  // the receivers that accepted it
}

// maxReceivers bounds the receivers recorded per nonce: generations
// overlap two at a time (the retiring one keeps its subscription until
// its successor has subscribed).
const maxReceivers = 4

type nonceExpiry struct {
	nonce   string
	expires time.Time
}

// accept records that receiver id, subscribed since since, got nonce
// (whose message may be accepted until expires), and reports whether to
// accept it. Each receiver accepts a nonce once. Another receiver accepts
// it too only when it was subscribed before the nonce was first received:
// then this is the same publication reaching both (two generations during
// a handover, each with its own L1); otherwise it is a replay.
func (n *nonceSet) accept(nonce string, expires, now time.Time, id uint64, since time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.seen == nil {
		n.seen = make(map[string]*nonceSeen)
	}
	for n.head < len(n.order) {
		e := n.order[n.head]
		if e.expires.After(now) && len(n.order)-n.head < n.max {
			break
		}
		delete(n.seen, e.nonce)
		n.order[n.head] = nonceExpiry{}
		n.head++
	}
	if n.head > len(n.order)/2 {
		n.order = append(n.order[:0], n.order[n.head:]...)
		n.head = 0
	}
	s, ok := n.seen[nonce]
	if !ok {
		n.seen[nonce] = &nonceSeen{first: now, by: []uint64{id}}
		n.order = append(n.order, nonceExpiry{nonce, expires})
		return true
	}
	if s.first.Before(since) || slices.Contains(s.by, id) || len(s.by) >= maxReceivers {
		return false
	}
	s.by = append(s.by, id)
	return true
}
