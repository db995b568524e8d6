package invalidate

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// A replica whose clock runs behind the purging sidecar's applies the
// repeat to every copy it holds that was requested before the purge,
// including the copies it promoted from L2 that another replica fetched
// (their RequestTime is that replica's clock, not this one's): a late
// fill's write-back read from L2 between the purge and its repeat is
// exactly what the repeat is for. Limiting the repeat to the replica's
// own now, which a lagging clock puts before the purge, kept it until
// its TTL.
func TestALaggingReplicaAppliesARepeatToWhatAnotherReplicaFetchedBeforeThePurge(t *testing.T) {
	purged := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	const lag = 3 * time.Second // the replica's clock behind the sender's
	for name, purge := range map[string]func(p *Purger){
		"a purge": func(p *Purger) {
			_, _ = p.Purge(context.Background(), Request{URLs: []string{"http://a.example/x"}})
		},
		"an unsafe request": func(p *Purger) {
			p.Invalidate(context.Background(), []*url.URL{{Scheme: "http", Host: "a.example", Path: "/x"}})
		},
		"a tag purge": func(p *Purger) {
			_, _ = p.Purge(context.Background(), Request{Tags: []string{"t"}})
		},
	} {
		t.Run(name, func(t *testing.T) {
			sender, _, _ := newPurger(t, "")
			l2 := newSharedL2()
			sender.SetRemote(l2, "sender", time.Second, nil)
			sender.again.after = time.Hour // Close runs it
			sender.clock = testingclock.NewFakeClock(purged)
			purge(sender)
			sender.Close()
			l2.mu.Lock()
			raw := append([][]byte(nil), l2.raw...)
			l2.mu.Unlock()
			if len(raw) != 2 {
				t.Fatalf("%d messages, want the purge and its repeat", len(raw))
			}

			replica, cache, _ := newPurger(t, "")
			// The repeat arrives RepeatAfter after the purge, on a clock
			// that reads lag less.
			replica.clock = testingclock.NewFakeClock(purged.Add(RepeatAfter - lag))
			replica.HandleMessage(raw[0])
			// Another replica (on the sender's time) sent its request
			// 100 ms before the purge and wrote the response to L2 after
			// the purge deleted the key; this replica read it from there.
			key := putRequested(t, cache, "a.example", "/x", purged.Add(-100*time.Millisecond))
			if e, err := cache.Get(key); err == nil {
				e.Tags = []string{"t"}
				if err := cache.Set(key, &e); err != nil {
					t.Fatal(err)
				}
			}
			replica.HandleMessage(raw[1])
			if present(cache, key) {
				t.Fatal("the repeat kept a response requested before the purge: the replica's clock runs behind")
			}
		})
	}
}

// queuedL2 is sharedL2 seen from a replica with an L2 write queue: its
// writes wait in queued until flush, and Forget drops them, as
// store.Layered's do.
type queuedL2 struct {
	*sharedL2
	qmu    sync.Mutex
	queued map[string]time.Time // key → its entry's RequestTime
}

func (q *queuedL2) queue(key string, requested time.Time) {
	q.qmu.Lock()
	defer q.qmu.Unlock()
	if q.queued == nil {
		q.queued = map[string]time.Time{}
	}
	q.queued[key] = requested
}

func (q *queuedL2) flush() {
	q.qmu.Lock()
	defer q.qmu.Unlock()
	for k, at := range q.queued {
		q.putAt(k, at)
	}
	q.queued = nil
}

func (q *queuedL2) Forget(sel Selector) {
	q.qmu.Lock()
	defer q.qmu.Unlock()
	if sel.Kind != SelectKeys {
		q.queued = nil
		return
	}
	for _, k := range sel.Values {
		delete(q.queued, k)
	}
}

// Seq is the tier's counter: the number of the last message published.
func (q *queuedL2) Seq(context.Context) (uint64, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return uint64(len(q.published)), true, nil
}

// A replica that missed a purge's message (it was disconnected) never
// dropped the L2 write its fill of the purged resource queued: neither
// the purge's message (lost) nor its repeat (which drops no queued write
// any more) reached its queue. Its resubscription, which finds that
// messages were missed and so marks every fill and clears L1, must drop
// its queued L2 writes too; else a write still queued when the repeat
// cleared L2 lands after it, and the purged response stays in L2 until
// its TTL, served by every replica.
func TestAReplicaThatMissedAPurgeDropsItsQueuedL2WritesWhenItResubscribes(t *testing.T) {
	purged := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	for name, purge := range map[string]func(p *Purger){
		"a purge": func(p *Purger) {
			_, _ = p.Purge(context.Background(), Request{URLs: []string{"http://a.example/x"}})
		},
		"an unsafe request": func(p *Purger) {
			p.Invalidate(context.Background(), []*url.URL{{Scheme: "http", Host: "a.example", Path: "/x"}})
		},
	} {
		t.Run(name, func(t *testing.T) {
			l2 := newSharedL2()
			sender, _, _ := newPurger(t, "")
			sender.SetRemote(l2, "sender", time.Second, nil)
			sender.again.after = time.Hour // Close runs it
			sender.clock = testingclock.NewFakeClock(purged)

			replica, cache, _ := newPurger(t, "")
			q := &queuedL2{sharedL2: l2}
			replica.SetRemote(q, "replica", time.Second, nil)
			replica.clock = testingclock.NewFakeClock(purged)
			replica.Subscribed(context.Background(), purged.Add(-time.Minute))

			// The replica's fill, requested 100 ms before the purge, is
			// stored in its L1 and queued for L2; the purge's message
			// is lost on the way to it.
			key := putRequested(t, cache, "a.example", "/x", purged.Add(-100*time.Millisecond))
			q.queue(key, purged.Add(-100*time.Millisecond))
			purge(sender)

			replica.Subscribed(context.Background(), purged)
			if present(cache, key) {
				t.Fatal("the resubscription kept L1 though a message was missed")
			}
			sender.Close() // the repeat: L2, then its message
			l2.mu.Lock()
			repeat := l2.raw[len(l2.raw)-1]
			l2.mu.Unlock()
			replica.HandleMessage(repeat)
			q.flush() // the queued write lands

			if l2.has(key) {
				t.Fatal("the purged response, queued for L2 by a replica that missed the purge, landed in L2 after the repeat")
			}
		})
	}
}
