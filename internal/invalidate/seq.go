package invalidate

import (
	"sync"
	"time"
)

// Bounds of the missed-message check (docs/l2.md, "Purges and
// invalidations across replicas").
const (
	// maxAheadSeqs bounds the numbers remembered past a gap in the
	// sequence (a message not received yet); beyond it the sidecar stops
	// counting and its next resubscription clears L1.
	maxAheadSeqs = 4096
	// unsequencedWindow: for this long after a message without a sequence
	// number (a sidecar of a version before them, during a rolling
	// upgrade, or one that could not take a number), a resubscription
	// clears L1, since the counter does not cover such senders.
	unsequencedWindow = time.Hour
)

// seqs follows the tier's invalidation sequence as one subscription sees
// it, to tell after a resubscription whether a message was missed.
// Every published message carries the number it took from the tier's
// counter in L2 (inside the signed part, so that nobody without the key
// can claim one). The purger knows that it has received every number up
// to upTo; at a resubscription it reads the counter: the same number
// means nothing was published while it was away.
type seqs struct {
	mu sync.Mutex
	// known: upTo is meaningful (a counter was read at the last
	// subscription, and no more than maxAheadSeqs arrived past a gap).
	known bool
	upTo  uint64
	// ahead are the numbers received past upTo+1 (out of order: two
	// senders may take numbers in one order and publish in the other).
	ahead map[uint64]struct{}
	// unsequencedAt is when the last message without a number arrived.
	unsequencedAt time.Time
}

// saw records that message n was received (or published by this sidecar).
func (s *seqs) saw(n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.known || n <= s.upTo {
		return
	}
	if n != s.upTo+1 {
		if len(s.ahead) >= maxAheadSeqs {
			s.known, s.ahead = false, nil
			return
		}
		if s.ahead == nil {
			s.ahead = make(map[uint64]struct{})
		}
		s.ahead[n] = struct{}{}
		return
	}
	s.upTo = n
	for {
		if _, ok := s.ahead[s.upTo+1]; !ok {
			return
		}
		delete(s.ahead, s.upTo+1)
		s.upTo++
	}
}

// sawUnsequenced records that a message without a number arrived at now.
func (s *seqs) sawUnsequenced(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unsequencedAt = now
}

// subscribed takes the counter read at a (re)subscription and reports
// whether a message may have been missed since the previous one: unless
// the counter was read, existed, and equals the last number received
// with none missing before it, and no unnumbered message arrived within
// unsequencedWindow. (A number taken but not yet published when the
// counter is read counts as missed: conservative.) The counter becomes
// the new starting point; read false: the counter could not be read.
func (s *seqs) subscribed(counter uint64, existed, read bool, now time.Time) (missed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	recentUnsequenced := !s.unsequencedAt.IsZero() && now.Sub(s.unsequencedAt) < unsequencedWindow
	missed = !read || !existed || !s.known || counter != s.upTo || len(s.ahead) > 0 || recentUnsequenced
	s.known, s.upTo, s.ahead = read, counter, nil
	return missed
}
