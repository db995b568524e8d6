package invalidate

import (
	"testing"
	"time"
)

func TestAResubscriptionFindsAMissedMessageByTheSequence(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	type read struct {
		counter       uint64
		existed, read bool
	}
	at := func(n uint64) read { return read{n, true, true} }
	cases := []struct {
		name       string
		first      read     // at the first subscription
		saw        []uint64 // messages received, in order (0: unnumbered)
		unnumbered time.Duration
		again      read // at the resubscription
		wantMissed bool
	}{
		{"nothing published while away keeps L1", at(100), nil, 0, at(100), false},
		{"every message received keeps L1", at(100), []uint64{101, 102}, 0, at(102), false},
		{"messages received out of order keep L1", at(100), []uint64{102, 101, 103}, 0, at(103), false},
		{"a message published while away clears L1", at(100), []uint64{101}, 0, at(102), true},
		{"a message missed before others that arrived clears L1", at(100), []uint64{102, 103}, 0, at(103), true},
		{"a counter that went back (Redis restarted) clears L1", at(100), nil, 0, at(7), true},
		{"a counter that was missing (flushed or evicted) clears L1", at(100), nil, 0, read{5 << 32, false, true}, true},
		{"a counter that cannot be read clears L1", at(100), nil, 0, read{}, true},
		{"a first subscription that could not read the counter makes the next one clear L1", read{}, nil, 0, at(100), true},
		{"a counter started at the first subscription is a starting point", read{5 << 32, false, true}, nil, 0, at(5 << 32), false},
		{"an unnumbered message within the hour clears L1", at(100), []uint64{0}, unsequencedWindow - time.Minute, at(100), true},
		{"an unnumbered message over an hour ago does not", at(100), []uint64{0}, unsequencedWindow + time.Minute, at(100), false},
		{"a message numbered before the subscription is no gap", at(100), []uint64{99, 101}, 0, at(101), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s seqs
			s.subscribed(c.first.counter, c.first.existed, c.first.read, t0)
			for _, n := range c.saw {
				if n == 0 {
					s.sawUnsequenced(t0)
					continue
				}
				s.saw(n)
			}
			if got := s.subscribed(c.again.counter, c.again.existed, c.again.read, t0.Add(c.unnumbered)); got != c.wantMissed {
				t.Fatalf("missed %v, want %v", got, c.wantMissed)
			}
		})
	}
}

func TestTheNumbersPastAGapStayBounded(t *testing.T) {
	var s seqs
	now := time.Now()
	s.subscribed(100, true, true, now)
	for n := uint64(102); n < 102+2*maxAheadSeqs; n++ { // 101 never comes
		s.saw(n)
	}
	if len(s.ahead) > maxAheadSeqs {
		t.Fatalf("%d numbers remembered past the gap, want at most %d", len(s.ahead), maxAheadSeqs)
	}
	s.saw(101)
	if !s.subscribed(102+2*maxAheadSeqs-1, true, true, now) {
		t.Fatal("after giving up counting, the resubscription kept L1")
	}
}
