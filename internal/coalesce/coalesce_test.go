package coalesce

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// group is the Group the tests use: a string result, an int stream.
type group = Group[string, int]

// long is a wait no test expects to run out.
const long = 10 * time.Second

func TestTheFirstJoinLeadsAndTheRestWaitOnItsFlight(t *testing.T) {
	var g group
	f, l := g.Join("k")
	if l == nil {
		t.Fatal("the first Join of a key did not lead")
	}
	f2, l2 := g.Join("k")
	if l2 != nil || f2 != f {
		t.Fatalf("a second Join of the key led (%v) or got another flight (%v)", l2 != nil, f2 != f)
	}
	if other, lo := g.Join("other"); lo == nil || other == f {
		t.Fatal("another key shares the first key's flight")
	}
	if g.Running("k") != f {
		t.Fatal("Running does not return the key's flight")
	}
	if g.Running("none") != nil {
		t.Fatal("Running returned a flight for a key nobody joined")
	}
	if _, l := g.Join("none"); l == nil {
		t.Fatal("Running started a flight")
	}
}

func TestAFlightEndsOnceThroughItsLead(t *testing.T) {
	var g group
	f, l := g.Join("k")
	w, _ := g.Join("k")
	l.Publish("first")
	l.Publish("second")
	l.End()
	if got := w.Wait(context.Background(), long); got != Ended {
		t.Fatalf("Wait = %v, want Ended", got)
	}
	if w.Result() != "first" || f.Result() != "first" {
		t.Fatalf("the flight left %q, want the first publish's result", w.Result())
	}
	if g.Running("k") != nil {
		t.Fatal("an ended flight is still running")
	}
	nf, nl := g.Join("k")
	if nl == nil || nf == f {
		t.Fatal("a Join after the end did not start a new flight")
	}
	// A late publish of the ended flight leaves the key's new one alone.
	l.Publish("late")
	if g.Running("k") != nf {
		t.Fatal("a late publish of an ended flight removed the key's new flight")
	}
}

func TestWaitersHaveTheResultBeforeTheOwnerReturns(t *testing.T) {
	var g group
	_, l := g.Join("k")
	w, _ := g.Join("k")
	got := make(chan string)
	go func() {
		w.Wait(context.Background(), long)
		got <- w.Result()
	}()
	l.Publish("stored")
	// The owner has not returned (End not called): the waiter is served.
	if r := <-got; r != "stored" {
		t.Fatalf("the waiter got %q, want %q", r, "stored")
	}
	l.End()
}

func TestEndWithoutPublishLeavesTheZeroResult(t *testing.T) {
	var g group
	_, l := g.Join("k")
	w, _ := g.Join("k")
	l.End()
	if got := w.Wait(context.Background(), long); got != Ended || w.Result() != "" {
		t.Fatalf("Wait = %v with %q, want Ended with the zero result", got, w.Result())
	}
}

func TestADetachedFetchPublishesAndEndDoesNot(t *testing.T) {
	var g group
	_, l := g.Join("k")
	w, _ := g.Join("k")
	l.Detach()
	l.End()
	if g.Running("k") == nil {
		t.Fatal("End ended a detached flight")
	}
	l.Publish("from the detached fetch")
	if w.Wait(context.Background(), long) != Ended || w.Result() != "from the detached fetch" {
		t.Fatalf("the waiter got %q, want the detached fetch's result", w.Result())
	}
}

func TestWaitersFollowAStreamUntilTheFlightEnds(t *testing.T) {
	var g group
	_, l := g.Join("k")
	w, _ := g.Join("k")
	l.Stream(7)
	l.Stream(8)
	if got := w.Wait(context.Background(), long); got != Streaming || w.Stream() != 7 {
		t.Fatalf("Wait = %v with stream %d, want Streaming with the first stream", got, w.Stream())
	}
	l.Publish("done")
	// Streamed and ended: the result is what counts.
	if got := w.Wait(context.Background(), long); got != Ended {
		t.Fatalf("Wait on a streamed flight that ended = %v, want Ended", got)
	}
}

func TestAWaiterThatGivesUpLeavesTheFlightRunning(t *testing.T) {
	var g group
	_, l := g.Join("k")
	w, _ := g.Join("k")
	if got := w.Wait(context.Background(), time.Millisecond); got != TimedOut {
		t.Fatalf("Wait past its timeout = %v, want TimedOut", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := w.Wait(ctx, long); got != Canceled {
		t.Fatalf("Wait with its context ended = %v, want Canceled", got)
	}
	if g.Running("k") == nil {
		t.Fatal("a waiter giving up ended the flight")
	}
	l.End()
}

func TestANilLeadIsAFetchOnItsOwn(t *testing.T) {
	var l *Lead[string, int]
	l.Publish("x")
	l.Stream(1)
	l.Detach()
	l.End()
}

func TestTheSeamsRunAsRequestsJoinAndWait(t *testing.T) {
	var g group
	var joins, waits []string
	g.BeforeJoin = func(key string) { joins = append(joins, key) }
	g.Waiting = func(key string) { waits = append(waits, key) }
	_, l := g.Join("k")
	w, _ := g.Join("k")
	l.Publish("r")
	w.Wait(context.Background(), long)
	if len(joins) != 2 || len(waits) != 1 || waits[0] != "k" {
		t.Fatalf("BeforeJoin ran for %q, Waiting for %q; want two joins and one wait of k", joins, waits)
	}
}

// Under a herd exactly one request leads, and every other gets its
// result.
func TestAHerdSharesOneFetch(t *testing.T) {
	var g group
	var fetches, waiting atomic.Int32
	g.Waiting = func(string) { waiting.Add(1) }
	const herd = 64
	results := make(chan string, herd)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range herd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f, l := g.Join("k")
			if l == nil {
				if f.Wait(context.Background(), long) != Ended {
					results <- "not ended"
					return
				}
				results <- f.Result()
				return
			}
			defer l.End()
			fetches.Add(1)
			// Hold the flight until the herd has gathered: a late joiner
			// would start a flight of its own.
			for deadline := time.Now().Add(long); ; time.Sleep(time.Millisecond) {
				g.mu.Lock()
				n := len(g.m)
				g.mu.Unlock()
				if n == 1 && waiting.Load() == herd-1 || time.Now().After(deadline) {
					break
				}
			}
			l.Publish("fetched")
			results <- "fetched"
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	for r := range results {
		if r != "fetched" {
			t.Fatalf("a request got %q, want the one fetch's result", r)
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d fetches for one key, want 1", n)
	}
}
