package connguard

import (
	"net"
	"net/http"
	"testing"
	"time"
)

// acceptedConn is a connection accepted by a Listener with MaxConns, as
// net/http gets it, and its client end.
func acceptedConn(t testing.TB) (*conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl := Listener(ln, MaxConns(4, nil))
	t.Cleanup(func() { gl.Close() })
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	sc, err := gl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	return sc.(*conn), cc
}

// ConnState runs twice per request (active, then idle): it allocates
// nothing, and it never takes the slots' lock, which Accept holds while
// it scans a full listener (the poke of the idle state, on a full
// channel, is the runtime's lock-free fast path of a non-blocking send).
func TestConnStateAllocatesNothingAndTakesNoLock(t *testing.T) {
	gc, _ := acceptedConn(t)
	ConnState(gc, http.StateNew)
	if n := testing.AllocsPerRun(1000, func() {
		ConnState(gc, http.StateActive)
		ConnState(gc, http.StateIdle)
	}); n != 0 {
		t.Errorf("ConnState allocates %v times per request", n)
	}
	if gc.reclaimableAt.Load() <= 0 {
		t.Fatal("an idle connection is not marked reclaimable")
	}

	gc.slots.mu.Lock()
	defer gc.slots.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			ConnState(gc, http.StateActive)
			ConnState(gc, http.StateIdle)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("ConnState waits for the lock Accept holds")
	}
}

// BenchmarkConnState is what --max-connections adds to each request:
// net/http's two state changes.
func BenchmarkConnState(b *testing.B) {
	gc, _ := acceptedConn(b)
	b.ReportAllocs()
	for b.Loop() {
		ConnState(gc, http.StateActive)
		ConnState(gc, http.StateIdle)
	}
}
