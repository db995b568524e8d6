package invalidate

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store/l1"
)

// sharedL2 stands for L2 as the repeats see it: keys that exist, the
// messages published, and the time each soft purge was made at. (The
// sidecar's test of the repeat runs on a real Redis:
// TestAPurgedResponseWrittenBackToL2ByALateFillIsPurgedAgain.)
type sharedL2 struct {
	mu        sync.Mutex
	keys      map[string]bool
	requested map[string]time.Time // a key's entry's RequestTime (zero unless putAt)
	published []message
	raw       [][]byte // published, as sent
	softAt    []time.Time
}

func newSharedL2() *sharedL2 { return &sharedL2{keys: map[string]bool{}} }

func (s *sharedL2) put(key string) { s.putAt(key, time.Time{}) }

// putAt stores key with an entry requested at t.
func (s *sharedL2) putAt(key string, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[key] = true
	if s.requested == nil {
		s.requested = map[string]time.Time{}
	}
	s.requested[key] = t
}

func (s *sharedL2) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[key]
}

// raws is what was published, as sent.
func (s *sharedL2) raws() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.raw...)
}

func (s *sharedL2) messages() []message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]message(nil), s.published...)
}

// Purge deletes exact keys (with a Match, those it accepts); a soft purge
// records the time it was made at; tags and scans find nothing.
func (s *sharedL2) Purge(_ context.Context, sel Selector, m Mode) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.Soft {
		s.softAt = append(s.softAt, m.At)
		return 0, nil
	}
	if sel.Kind != SelectKeys {
		return 0, nil
	}
	n := 0
	for _, k := range sel.Values {
		if s.keys[k] && (sel.Match == nil || sel.Match(k, &entry.Entry{Kind: entry.KindResponse, RequestTime: s.requested[k]})) {
			n++
			delete(s.keys, k)
		}
	}
	return n, nil
}
func (s *sharedL2) Publish(_ context.Context, b []byte) error {
	var m message
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.published = append(s.published, m)
	s.raw = append(s.raw, b)
	return nil
}
func (s *sharedL2) NextSeq(context.Context) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint64(len(s.published) + 1), nil
}
func (s *sharedL2) Seq(context.Context) (uint64, bool, error) { return 0, true, nil }
func (s *sharedL2) Forget(Selector)                           {}

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
			p, cache, l2 := repeatingPurger(t, "me") // Close runs it: no timing in this test
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

// The repeat comes by itself, RepeatAfter after the purge on the
// Purger's clock, and not before.
func TestThePurgesRepeatComesAfterItsDelay(t *testing.T) {
	p, cache, _ := newPurger(t, "")
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC))
	p.clock = clk
	l2 := newSharedL2()
	p.SetRemote(l2, "me", time.Second, nil)
	t.Cleanup(p.Close)
	key := put(t, cache, "http", "a.example", "/x")
	_, _ = p.Purge(context.Background(), Request{URLs: []string{"http://a.example/x"}})
	l2.put(key)
	// The fake clock runs a due repeat inside Step, so each check below
	// follows the repeat or its absence, with no wait.
	clk.Step(RepeatAfter - time.Millisecond)
	if n := len(l2.messages()); n != 1 || !l2.has(key) {
		t.Fatalf("before RepeatAfter: %d messages, key in L2 %v; want 1 and the key still there (no repeat yet)", n, l2.has(key))
	}
	clk.Step(time.Millisecond)
	if n := len(l2.messages()); n != 2 || l2.has(key) {
		t.Fatalf("at RepeatAfter: %d messages, key in L2 %v; want 2 and the key removed (the repeat)", n, l2.has(key))
	}
}

// A soft purge is repeated as made at its first time (and the clock
// margin): it marks stale only what was requested before then, not what
// was fetched afresh since.
func TestASoftPurgeIsRepeatedAsMadeAtItsFirstTime(t *testing.T) {
	p, _, l2 := repeatingPurger(t, "me")
	first := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(first)
	p.clock = clk
	_, _ = p.Purge(context.Background(), Request{URLs: []string{"http://a.example/x"}, Soft: true})
	clk.SetTime(first.Add(time.Minute))
	p.Close()
	if len(l2.softAt) != 2 || !l2.softAt[0].Equal(first) || !l2.softAt[1].Equal(first.Add(repeatMargin)) {
		t.Fatalf("soft purges made at %v, want at %v, then at %v", l2.softAt, first, first.Add(repeatMargin))
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
	p, _, l2 := repeatingPurger(t, "me")
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

// pendingRepeats is how many repeats wait, and the bytes of URL text
// they hold.
func pendingRepeats(p *Purger) (n, size int) {
	p.again.mu.Lock()
	defer p.again.mu.Unlock()
	for k := range p.again.keyed {
		size += len(k)
	}
	return len(p.again.pending), size
}

// Any client may send unsafe requests: one to a new URL each time (a
// query string will do), or with URLs as long as the server accepts,
// must not make the sidecar hold repeats without bound. The unsafe
// requests themselves still invalidate at once.
func TestAFloodOfUnsafeRequestsToDistinctURLsHoldsBoundedRepeats(t *testing.T) {
	for name, c := range map[string]struct {
		n       int
		pathLen int
	}{
		"many short URLs": {n: 3 * 10000, pathLen: 8},
		"long URLs":       {n: 400, pathLen: 60 << 10},
	} {
		t.Run(name, func(t *testing.T) {
			p, _, l2 := repeatingPurger(t, "me")
			var dropped int
			p.OnRepeatDropped = func() { dropped++ }
			t.Cleanup(p.Close)
			pad := strings.Repeat("a", c.pathLen)
			for i := range c.n {
				p.Invalidate(context.Background(), []*url.URL{{Scheme: "http", Host: "a.example", Path: "/" + pad, RawQuery: "n=" + strconv.Itoa(i)}})
			}
			n, bytes := pendingRepeats(p)
			if n > 10000 || bytes > 4<<20 {
				t.Fatalf("%d unsafe requests to distinct URLs left %d repeats pending holding %d bytes of URLs: an attacker sets the sidecar's memory", c.n, n, bytes)
			}
			if n == 0 {
				t.Fatal("no repeat is pending at all")
			}
			if dropped != c.n-n {
				t.Fatalf("%d repeats pending of %d invalidations, %d counted as dropped", n, c.n, dropped)
			}
			if got := len(l2.messages()); got != c.n {
				t.Fatalf("%d invalidations published, want %d: each applies itself at once", got, c.n)
			}
		})
	}
}

// repeatingPurger is a purger with L2 (a sharedL2), named id in its
// messages, whose repeats wait an hour: Close runs them, so that no test
// depends on their timing.
func repeatingPurger(t *testing.T, id string) (*Purger, *l1.Cache, *sharedL2) {
	t.Helper()
	p, cache, _ := newPurger(t, "")
	l2 := newSharedL2()
	p.SetRemote(l2, id, time.Second, nil)
	p.again.after = time.Hour
	return p, cache, l2
}

// purgesOfX are the two ways http://a.example/x is removed cluster-wide,
// each repeated.
var purgesOfX = map[string]func(p *Purger){
	"a purge": func(p *Purger) {
		_, _ = p.Purge(context.Background(), Request{URLs: []string{"http://a.example/x"}})
	},
	"an unsafe request": func(p *Purger) {
		p.Invalidate(context.Background(), []*url.URL{{Scheme: "http", Host: "a.example", Path: "/x"}})
	},
}

// hangingL2 is an L2 that, once hanging, stops answering deletes: each
// waits until its context ends.
type hangingL2 struct {
	*sharedL2
	hanging atomic.Bool
	entered chan struct{}
}

// Purge hangs the hard purges of keys.
func (h *hangingL2) Purge(ctx context.Context, sel Selector, m Mode) (int, error) {
	if !h.hanging.Load() || m.Soft || sel.Kind != SelectKeys {
		return h.sharedL2.Purge(ctx, sel, m)
	}
	return h.hang(ctx)
}

func (h *hangingL2) hang(ctx context.Context) (int, error) {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return 0, ctx.Err()
}

// Close is bounded as a whole (closeTimeout): a repeat already running
// against an L2 that stopped answering does not hold a stopping sidecar
// for the repeat's own timeout.
func TestCloseDoesNotWaitARunningRepeatPastItsBound(t *testing.T) {
	p, _, _ := newPurger(t, "")
	l2 := &hangingL2{sharedL2: newSharedL2(), entered: make(chan struct{}, 1)}
	p.SetRemote(l2, "me", time.Minute, nil)
	p.again.after = time.Millisecond
	p.again.budget = 200 * time.Millisecond
	p.Invalidate(context.Background(), []*url.URL{{Scheme: "http", Host: "a.example", Path: "/x"}})
	l2.hanging.Store(true)
	select {
	case <-l2.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the repeat did not start within 5s")
	}
	start := time.Now()
	p.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Close took %s, waiting on a repeat that L2 does not answer; its bound is %s", took, p.again.budget)
	}
}

// A sidecar stopping while L2 does not answer applies what it can of
// its pending repeats within Close's bound and says once how many it
// left, instead of one failure per repeat for every repeat left.
func TestRepeatsLeftWhenCloseRunsOutOfTimeAreLoggedOnce(t *testing.T) {
	p, _, _ := newPurger(t, "")
	l2 := &hangingL2{sharedL2: newSharedL2(), entered: make(chan struct{}, 1)}
	var logged lineCounter
	p.SetRemote(l2, "me", time.Minute, slog.New(slog.NewTextHandler(&logged, nil)))
	p.again.after = time.Hour
	p.again.budget = 100 * time.Millisecond
	const n = 1000
	for i := range n {
		p.Invalidate(context.Background(), []*url.URL{{Scheme: "http", Host: "a.example", Path: "/x", RawQuery: strconv.Itoa(i)}})
	}
	l2.hanging.Store(true)
	before := logged.lines()
	start := time.Now()
	p.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Close took %s", took)
	}
	if got := logged.lines() - before; got > 3 {
		t.Fatalf("Close logged %d lines for %d repeats it could not apply: one per repeat", got, n)
	}
}

type lineCounter struct {
	mu sync.Mutex
	n  int
}

func (c *lineCounter) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += bytes.Count(b, []byte("\n"))
	return len(b), nil
}

func (c *lineCounter) lines() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// A repeat is the same purge or invalidation again: the replicas that
// apply its message do not count it in tiercache_purges_total (OnPurge)
// any more than the sidecar that repeats it.
func TestARepeatIsNotCountedAsAPurgeByTheReplicasThatApplyIt(t *testing.T) {
	for name, purge := range purgesOfX {
		t.Run(name, func(t *testing.T) {
			sender, _, l2 := repeatingPurger(t, "sender")
			var sent int
			sender.OnPurge = func() { sent++ }
			purge(sender)
			sender.Close()

			replica, cache, _ := newPurger(t, "")
			var applied int
			replica.OnPurge = func() { applied++ }
			raw := l2.raws()
			if len(raw) != 2 {
				t.Fatalf("%d messages, want the purge and its repeat", len(raw))
			}
			replica.HandleMessage(raw[0])
			key := put(t, cache, "http", "a.example", "/x")
			replica.HandleMessage(raw[1])
			if present(cache, key) {
				t.Fatal("the replica did not apply the repeat")
			}
			if sent != 1 || applied != 1 {
				t.Fatalf("counted %d purges where it was made and %d where it was applied, want 1 and 1", sent, applied)
			}
		})
	}
}

// Invalidations of the same URLs from many goroutines, with timers
// firing while a repeat is replaced and while Close takes them: every
// URL is repeated at least once after its last invalidation, and Close
// returns (a repeat counted twice or never would panic or hang its
// WaitGroup). Run under -race.
func TestRepeatsReplacedAndClosedWhileTheirTimersFire(t *testing.T) {
	p, _, _ := newPurger(t, "")
	l2 := newSharedL2()
	p.SetRemote(l2, "me", time.Second, nil)
	p.again.after = 20 * time.Microsecond
	urls := []string{"/a", "/b", "/c"}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				path := urls[(g+i)%len(urls)]
				p.Invalidate(context.Background(), []*url.URL{{Scheme: "http", Host: "a.example", Path: path}})
			}
		})
	}
	wg.Wait()
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s")
	}
	// Whether a repeat was published after the last invalidation of
	// each URL.
	repeated := map[string]bool{}
	for _, m := range l2.messages() {
		for _, u := range m.Invalidate {
			repeated[u] = m.Repeat
		}
	}
	for _, path := range urls {
		if u := "http://a.example" + path; !repeated[u] {
			t.Errorf("%s was not repeated after its last invalidation", u)
		}
	}
	if n, _ := pendingRepeats(p); n != 0 {
		t.Fatalf("%d repeats pending after Close", n)
	}
}
