package invalidate

import (
	"context"
	"testing"
	"time"
)

// clock is a settable time for the purgers of one sidecar.
type fakeTime struct{ now time.Time }

func (c *fakeTime) Now() time.Time { return c.now }

// generation is a purger as dataPlane.build makes one: sharing the
// sidecar's keyring, counting the purges it applies.
func generation(t *testing.T, keys *Keyring, ch string, c *fakeTime) (*Purger, *int) {
	t.Helper()
	p, _, _ := newPurger(t, "")
	p.SetAuth(Auth{Keys: keys, Channel: ch, Now: c.Now})
	applied := new(int)
	p.OnPurge = func() { *applied++ }
	return p, applied
}

// The nonces a sidecar has seen are shared by every generation of its
// data plane (they live with the keyring): after a rebuild (an L1 size
// change, a Redis password rotation, a new L2 address) whoever can
// publish on the channel (and so also read it) cannot republish a
// captured purge of everything to the new generation.
func TestASignedPurgeIsNotReplayedToTheNextGeneration(t *testing.T) {
	ch, t0, c, keys, sender := signedChannel()

	first, applied1 := generation(t, keys, ch, c)
	first.Subscribed(context.Background(), t0)
	c.now = t0.Add(time.Second)
	captured, err := sender.seal([]byte(`{"from":"shop/web-1#0001","all":true}`))
	if err != nil {
		t.Fatal(err)
	}
	first.HandleMessage(captured)

	// The next generation subscribes after the original went by; the
	// attacker replays it within MaxMessageAge (and within the clock
	// skew of the subscription, so only the shared nonces stop it).
	c.now = t0.Add(2 * time.Second)
	next, applied2 := generation(t, keys, ch, c)
	next.Subscribed(context.Background(), c.now)
	c.now = t0.Add(3 * time.Second)
	next.HandleMessage(captured)

	if *applied1 != 1 {
		t.Fatalf("the first generation applied the signed purge %d times, want 1", *applied1)
	}
	if *applied2 != 0 {
		t.Errorf("the next generation applied a replay of a purge the sidecar had already applied")
	}
}

// During a handover both generations are subscribed (the retiring one
// until its successor has subscribed), each over its own L1 maybe: one
// publication reaches both, and both apply it, once each.
func TestOnePublicationReachesBothGenerationsOfAHandoverOnce(t *testing.T) {
	ch, t0, c, keys, sender := signedChannel()

	old, appliedOld := generation(t, keys, ch, c)
	old.Subscribed(context.Background(), t0)
	next, appliedNext := generation(t, keys, ch, c)
	next.Subscribed(context.Background(), t0.Add(time.Millisecond))
	c.now = t0.Add(time.Second)
	msg, err := sender.seal([]byte(`{"from":"shop/web-1#0001","urls":["/a"]}`))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the publication, then a replay of it to both
		old.HandleMessage(msg)
		next.HandleMessage(msg)
	}
	if *appliedOld != 1 || *appliedNext != 1 {
		t.Fatalf("applied %d times by the retiring generation and %d by the next, want once by each", *appliedOld, *appliedNext)
	}
}

// Pub/sub is not durable: a message signed before the subscription (less
// the allowed clock skew) can only be a replay, even to a sidecar that
// remembers nothing (a restarted one, a new keyring).
func TestAMessageSignedBeforeTheSubscriptionIsRefusedAfterARestart(t *testing.T) {
	const ch = "tc:shop/web:inval"
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	key := []byte("0123456789abcdef0123456789abcdef")
	cases := []struct {
		name     string
		signedAt time.Duration // relative to the subscription
		applied  int
	}{
		{"a message signed a minute before the subscription is refused", -time.Minute, 0},
		{"a message signed just beyond the clock skew before it is refused", -MaxClockSkew - time.Millisecond, 0},
		{"a message signed within the clock skew before it is applied", -MaxClockSkew + time.Second, 1},
		{"a message signed after it is applied", time.Second, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sub := t0.Add(time.Minute)
			c := &fakeTime{now: sub.Add(tc.signedAt)}
			senderKeys := NewKeyring()
			senderKeys.Set(key, t0)
			msg, err := newChannelAuth(Auth{Keys: senderKeys, Channel: ch, Now: c.Now}).seal([]byte(`{"from":"shop/web-1#0001","all":true}`))
			if err != nil {
				t.Fatal(err)
			}
			keys := NewKeyring() // the restarted sidecar's
			keys.Set(key, t0)
			var rejected []string
			p, applied := generation(t, keys, ch, c)
			p.SetAuth(Auth{Keys: keys, Channel: ch, Now: c.Now, Rejected: func(r string) { rejected = append(rejected, r) }})
			p.Subscribed(context.Background(), sub)
			c.now = sub.Add(max(tc.signedAt, 0) + time.Second)
			p.HandleMessage(msg)
			if *applied != tc.applied {
				t.Fatalf("applied %d times, want %d (refused: %v)", *applied, tc.applied, rejected)
			}
			if tc.applied == 0 && (len(rejected) != 1 || rejected[0] != RejectReplay) {
				t.Fatalf("refusals %v, want one %q", rejected, RejectReplay)
			}
		})
	}
}

// signedChannel is a tier's channel with a key set at t0, a test clock at
// t0 and a sender signing with that key.
func signedChannel() (ch string, t0 time.Time, c *fakeTime, keys *Keyring, sender *channelAuth) {
	ch = "tc:shop/web:inval"
	t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	c = &fakeTime{now: t0}
	keys = NewKeyring()
	keys.Set([]byte("0123456789abcdef0123456789abcdef"), t0)
	return ch, t0, c, keys, newChannelAuth(Auth{Keys: keys, Channel: ch, Now: c.Now})
}
