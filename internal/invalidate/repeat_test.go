package invalidate

import (
	"context"
	"encoding/json"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
)

// sharedL2 stands for L2 as the repeats see it: keys that exist, the
// messages published, and the time each soft purge was made at. (The
// sidecar's test of the repeat runs on a real Redis:
// TestAPurgedResponseWrittenBackToL2ByALateFillIsPurgedAgain.)
type sharedL2 struct {
	mu        sync.Mutex
	keys      map[string]bool
	published []message
	softAt    []time.Time
}

func newSharedL2() *sharedL2 { return &sharedL2{keys: map[string]bool{}} }

func (s *sharedL2) put(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[key] = true
}

func (s *sharedL2) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[key]
}

func (s *sharedL2) messages() []message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]message(nil), s.published...)
}

func (s *sharedL2) Delete(_ context.Context, keys ...string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, k := range keys {
		if s.keys[k] {
			n++
			delete(s.keys, k)
		}
	}
	return n, nil
}
func (s *sharedL2) PurgeTags(context.Context, []string) (int, error) { return 0, nil }
func (s *sharedL2) PurgeMatching(context.Context, func(string, *entry.Entry) bool) (int, error) {
	return 0, nil
}
func (s *sharedL2) Publish(_ context.Context, b []byte) error {
	var m message
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.published = append(s.published, m)
	return nil
}
func (s *sharedL2) NextSeq(context.Context) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint64(len(s.published) + 1), nil
}
func (s *sharedL2) Seq(context.Context) (uint64, bool, error) { return 0, true, nil }
func (s *sharedL2) Forget(...string)                          {}
func (s *sharedL2) ForgetAll()                                {}
func (s *sharedL2) ExpireKeys(_ context.Context, at time.Time, _ []string, _ func(string, *entry.Entry) bool) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.softAt = append(s.softAt, at)
	return 0, nil
}
func (s *sharedL2) ExpireTags(context.Context, time.Time, []string, func(string, *entry.Entry) bool) (int, error) {
	return 0, nil
}
func (s *sharedL2) ExpireMatching(context.Context, time.Time, func(string, *entry.Entry) bool) (int, error) {
	return 0, nil
}

// A purge is applied again: a response another replica wrote back to L2
// after the purge deleted it (before that replica had the purge's
// message) is deleted, from here and through the channel from every
// replica's L1.
func TestAClusterWidePurgeIsAppliedAgainAfterItsDelay(t *testing.T) {
	for name, purge := range map[string]func(p *Purger){
		"a purge by URL": func(p *Purger) {
			_, _ = p.Purge(context.Background(), Request{URLs: []string{"http://a.example/x"}})
		},
		"an unsafe request": func(p *Purger) {
			p.Invalidate(context.Background(), []*url.URL{{Scheme: "http", Host: "a.example", Path: "/x"}})
		},
	} {
		t.Run(name, func(t *testing.T) {
			p, cache, _ := newPurger(t, "")
			l2 := newSharedL2()
			p.SetRemote(l2, "me", time.Second, nil)
			p.again.after = time.Hour // Close runs it: no timing in this test
			key := put(t, cache, "http", "a.example", "/x")
			l2.put(key)

			purge(p)
			if l2.has(key) || present(cache, key) || len(l2.messages()) != 1 {
				t.Fatalf("the purge itself: in L2 %v, in L1 %v, messages %d", l2.has(key), present(cache, key), len(l2.messages()))
			}
			// Another replica's fill, begun before the purge, lands now.
			l2.put(key)
			put(t, cache, "http", "a.example", "/x") // and this replica read it back from L2
			p.Close()
			if l2.has(key) {
				t.Fatal("the purged response written back to L2 after the purge is still there")
			}
			if present(cache, key) {
				t.Fatal("this replica still holds the purged response it read back from L2")
			}
			if n := len(l2.messages()); n != 2 {
				t.Fatalf("%d messages published, want 2: the other replicas are not told to drop their copies", n)
			}
		})
	}
}

// The repeat comes by itself, after the delay.
func TestThePurgesRepeatComesAfterItsDelay(t *testing.T) {
	p, cache, _ := newPurger(t, "")
	l2 := newSharedL2()
	p.SetRemote(l2, "me", time.Second, nil)
	p.again.after = time.Millisecond
	t.Cleanup(p.Close)
	key := put(t, cache, "http", "a.example", "/x")
	_, _ = p.Purge(context.Background(), Request{URLs: []string{"http://a.example/x"}})
	l2.put(key)
	deadline := time.Now().Add(5 * time.Second)
	for len(l2.messages()) < 2 || l2.has(key) {
		if time.Now().After(deadline) {
			t.Fatalf("no repeat within 5s: messages %d, key in L2 %v", len(l2.messages()), l2.has(key))
		}
		time.Sleep(time.Millisecond)
	}
}

// A soft purge is repeated as made at its first time: it marks stale
// only what was requested before it, not what was fetched afresh since.
func TestASoftPurgeIsRepeatedAsMadeAtItsFirstTime(t *testing.T) {
	p, _, _ := newPurger(t, "")
	l2 := newSharedL2()
	p.SetRemote(l2, "me", time.Second, nil)
	p.again.after = time.Hour
	first := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	now := first
	p.now = func() time.Time { return now }
	_, _ = p.Purge(context.Background(), Request{URLs: []string{"http://a.example/x"}, Soft: true})
	now = first.Add(time.Minute)
	p.Close()
	if len(l2.softAt) != 2 || !l2.softAt[1].Equal(first) {
		t.Fatalf("soft purges made at %v, want twice at %v", l2.softAt, first)
	}
}

// Without a Remote there is nothing another replica could write back:
// nothing is repeated.
func TestALocalPurgeIsNotRepeated(t *testing.T) {
	p, cache, _ := newPurger(t, "")
	p.again.after = time.Hour
	_, _ = p.Purge(context.Background(), Request{URLs: []string{"http://a.example/x"}})
	key := put(t, cache, "http", "a.example", "/x")
	p.Close()
	if !present(cache, key) {
		t.Fatal("a purge without L2 was repeated")
	}
}

// A URL written many times a second costs one repeat, after the last
// write: each invalidation deletes at once, and the repeat covers the
// last of them.
func TestInvalidationsOfOneURLShareOneRepeat(t *testing.T) {
	p, _, _ := newPurger(t, "")
	l2 := newSharedL2()
	p.SetRemote(l2, "me", time.Second, nil)
	p.again.after = time.Hour
	u := []*url.URL{{Scheme: "http", Host: "a.example", Path: "/x"}}
	for range 5 {
		p.Invalidate(context.Background(), u)
	}
	p.Invalidate(context.Background(), []*url.URL{{Scheme: "http", Host: "a.example", Path: "/y"}})
	p.Close()
	if n := len(l2.messages()); n != 6+2 {
		t.Fatalf("%d messages, want 6 invalidations and 2 repeats (one per URL)", n)
	}
}
