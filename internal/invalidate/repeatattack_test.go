package invalidate

import (
	"context"
	"net/url"
	"testing"
	"time"
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
			sender.now = func() time.Time { return purged }
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
			replica.now = func() time.Time { return purged.Add(RepeatAfter - lag) }
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
