package invalidate

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// endpoint is one side of the channel with its own keyring and clock.
type endpoint struct {
	keys *Keyring
	now  time.Time
	a    *channelAuth
}

func newEndpoint(channel string, t0 time.Time, keys ...string) *endpoint {
	e := &endpoint{keys: NewKeyring(), now: t0}
	for _, k := range keys {
		e.keys.Set([]byte(k), t0)
	}
	e.a = newChannelAuth(Auth{Keys: e.keys, Channel: channel, Now: func() time.Time { return e.now }})
	return e
}

func TestAMessageIsAppliedOnlyWhenSignedRecentAndNew(t *testing.T) {
	const ch = "tc:shop/web:inval"
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	body := []byte(`{"from":"a","all":true}`)
	cases := []struct {
		name string
		// send returns the bytes on the wire; recv is the receiver.
		send func(t *testing.T) []byte
		recv func() *endpoint
		want string // reject reason, "" = accepted
	}{
		{"a message signed with the tier's key is accepted",
			sealWith(ch, t0, body, "k1"), receiver(ch, t0, "k1"), ""},
		{"an unsigned message is refused once a key is set",
			func(*testing.T) []byte { return body }, receiver(ch, t0, "k1"), RejectUnsigned},
		{"a message with its MACs removed is refused as unsigned",
			edit(sealWith(ch, t0, body, "k1"), func(s *sealed) { s.MACs = nil }), receiver(ch, t0, "k1"), RejectUnsigned},
		{"a message signed with another key is refused",
			sealWith(ch, t0, body, "forged"), receiver(ch, t0, "k1"), RejectBadMAC},
		{"a message whose body changed after signing is refused",
			edit(sealWith(ch, t0, body, "k1"), func(s *sealed) { s.Msg = json.RawMessage(`{"from":"a","prefix":"/x"}`) }), receiver(ch, t0, "k1"), RejectBadMAC},
		{"a message whose timestamp changed after signing is refused",
			edit(sealWith(ch, t0, body, "k1"), func(s *sealed) { s.TS++ }), receiver(ch, t0, "k1"), RejectBadMAC},
		{"a message signed for another tier's channel is refused",
			sealWith("tc:shop/other:inval", t0, body, "k1"), receiver(ch, t0, "k1"), RejectBadMAC},
		{"a message older than the maximum age is refused",
			sealWith(ch, t0, body, "k1"), receiver(ch, t0.Add(MaxMessageAge+time.Second), "k1"), RejectExpired},
		{"a message from beyond the allowed clock skew is refused",
			sealWith(ch, t0.Add(MaxClockSkew+time.Second), body, "k1"), receiver(ch, t0, "k1"), RejectFuture},
		{"a message from within the allowed clock skew is accepted",
			sealWith(ch, t0.Add(MaxClockSkew-time.Second), body, "k1"), receiver(ch, t0, "k1"), ""},
		{"more MACs than a grace period needs are refused",
			edit(sealWith(ch, t0, body, "k1"), func(s *sealed) { s.MACs = append(s.MACs, s.MACs[0], s.MACs[0]) }), receiver(ch, t0, "k1"), RejectMalformed},
		{"a message that is not JSON is refused",
			func(*testing.T) []byte { return []byte("flushall") }, receiver(ch, t0, "k1"), RejectMalformed},
		{"a message signed with the previous key is accepted during the grace period",
			sealWith(ch, t0.Add(KeyGrace-time.Second), body, "k1"), rotated(ch, t0, KeyGrace-time.Second), ""},
		{"a message signed with the previous key is refused after the grace period",
			sealWith(ch, t0.Add(KeyGrace+time.Second), body, "k1"), rotated(ch, t0, KeyGrace+time.Second), RejectBadMAC},
		{"a sender that rotated first is understood by a receiver that has not yet",
			func(t *testing.T) []byte {
				s := newEndpoint(ch, t0, "k1", "k2")
				return mustSeal(t, s, body)
			}, receiver(ch, t0, "k1"), ""},
		{"without a key an unsigned message is accepted",
			func(*testing.T) []byte { return body }, receiver(ch, t0), ""},
		{"without a key a signed message is accepted unverified",
			sealWith(ch, t0, body, "whatever"), receiver(ch, t0), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, reason := c.recv().a.open(c.send(t))
			if reason != c.want {
				t.Fatalf("reason %q, want %q", reason, c.want)
			}
			if c.want == "" && !bytes.Equal(got, body) {
				t.Fatalf("opened %q, want %q", got, body)
			}
		})
	}
}

func TestAReplayedMessageIsRefusedWhileItIsYoungEnoughToBeAccepted(t *testing.T) {
	const ch = "tc:shop/web:inval"
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	wire := sealWith(ch, t0, []byte(`{"from":"a","tags":["x"]}`), "k1")(t)
	r := newEndpoint(ch, t0, "k1")
	if _, reason := r.a.open(wire); reason != "" {
		t.Fatalf("first delivery refused: %s", reason)
	}
	for _, after := range []time.Duration{0, time.Second, MaxMessageAge - time.Millisecond} {
		r.now = t0.Add(after)
		if _, reason := r.a.open(wire); reason != RejectReplay {
			t.Fatalf("replay %v later: reason %q, want %q", after, reason, RejectReplay)
		}
	}
	r.now = t0.Add(MaxMessageAge + time.Millisecond)
	if _, reason := r.a.open(wire); reason != RejectExpired {
		t.Fatalf("replay after the window: reason %q, want %q", reason, RejectExpired)
	}
}

func TestTheNonceSetStaysBounded(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	n := nonceSet{max: 100}
	for i := range 1000 {
		if !n.accept(strings.Repeat("x", i%7)+string(rune('a'+i%26))+time.Duration(i).String(), t0.Add(time.Minute), t0, 1, t0) {
			t.Fatalf("nonce %d reported as seen", i)
		}
	}
	if len(n.seen) > 100 || len(n.order)-n.head > 100 || cap(n.order) > 400 {
		t.Fatalf("%d nonces remembered, %d queued (cap %d); want at most 100", len(n.seen), len(n.order)-n.head, cap(n.order))
	}
	// Expired nonces go without waiting for the set to fill.
	n.accept("late", t0.Add(2*time.Minute), t0.Add(90*time.Second), 1, t0)
	if len(n.seen) != 1 {
		t.Fatalf("%d nonces remembered after the others expired, want 1", len(n.seen))
	}
}

func TestAForgedMessageLeavesL1AloneAndIsCounted(t *testing.T) {
	p, cache, _ := newPurger(t, "")
	key := put(t, cache, "http", "a.example", "/a")
	keys := NewKeyring()
	keys.Set([]byte("tier key"), time.Now())
	var rejected []string
	p.SetAuth(Auth{Keys: keys, Channel: "tc:shop/web:inval", Rejected: func(r string) { rejected = append(rejected, r) }})

	p.HandleMessage([]byte(`{"from":"attacker","all":true}`))
	forger := newEndpoint("tc:shop/web:inval", time.Now(), "guessed key")
	p.HandleMessage(mustSeal(t, forger, []byte(`{"from":"attacker","all":true}`)))
	if !present(cache, key) {
		t.Fatal("a forged purge emptied L1")
	}
	if want := []string{RejectUnsigned, RejectBadMAC}; strings.Join(rejected, ",") != strings.Join(want, ",") {
		t.Fatalf("rejections counted %v, want %v", rejected, want)
	}

	sender := newEndpoint("tc:shop/web:inval", time.Now(), "tier key")
	p.HandleMessage(mustSeal(t, sender, []byte(`{"from":"b","all":true}`)))
	if present(cache, key) {
		t.Fatal("a purge signed with the tier's key was not applied")
	}
}

func receiver(channel string, now time.Time, keys ...string) func() *endpoint {
	return func() *endpoint { return newEndpoint(channel, now, keys...) }
}

// rotated is a receiver that replaced k1 by k2 at t0 and now lives after
// later.
func rotated(channel string, t0 time.Time, later time.Duration) func() *endpoint {
	return func() *endpoint {
		e := newEndpoint(channel, t0, "k1", "k2")
		e.now = t0.Add(later)
		return e
	}
}

func sealWith(channel string, at time.Time, body []byte, key string) func(t *testing.T) []byte {
	return func(t *testing.T) []byte { return mustSeal(t, newEndpoint(channel, at, key), body) }
}

func mustSeal(t *testing.T, e *endpoint, body []byte) []byte {
	t.Helper()
	b, err := e.a.seal(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func edit(send func(*testing.T) []byte, change func(*sealed)) func(*testing.T) []byte {
	return func(t *testing.T) []byte {
		var s sealed
		if err := json.Unmarshal(send(t), &s); err != nil {
			t.Fatal(err)
		}
		change(&s)
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}
