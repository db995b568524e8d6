package invalidate

import (
	"testing"
	"time"
)

// ATTACK: the nonces a sidecar has seen live in each data-plane
// generation's Purger (SetAuth makes a new set), while the keyring is
// shared by all of them. After any rebuild (an L1 size change, a Redis
// password rotation, a new L2 address) the new generation has never seen
// the signed messages of the last MaxMessageAge: whoever can publish on
// the channel (and so also read it) republishes a captured purge of
// everything, and every replica that rebuilt applies it again. docs/l2.md
// says only an evicted nonce's replay can get through.
func TestATTACKASignedPurgeIsReplayedToTheNextGeneration(t *testing.T) {
	const ch = "tc:shop/web:inval"
	t0 := time.Now()
	keys := NewKeyring()
	keys.Set([]byte("0123456789abcdef0123456789abcdef"), t0)
	sender := newChannelAuth(Auth{Keys: keys, Channel: ch})
	captured, err := sender.seal([]byte(`{"from":"shop/web-1#0001","all":true}`))
	if err != nil {
		t.Fatal(err)
	}

	// Two generations of one sidecar, as dataPlane.build makes them.
	var applied [2]int
	for i := range applied {
		p, _, _ := newPurger(t, "")
		p.SetAuth(Auth{Keys: keys, Channel: ch})
		p.OnPurge = func() { applied[i]++ }
		// The first generation gets the original; the attacker replays it
		// to the second one, within MaxMessageAge.
		p.HandleMessage(captured)
	}
	if applied[0] != 1 {
		t.Fatalf("the first generation applied the signed purge %d times, want 1", applied[0])
	}
	if applied[1] != 0 {
		t.Errorf("the next generation applied a replay of a purge the sidecar had already applied")
	}
}
