package connguard

// Constructors and observers that only tests use (the product embeds a
// tracker in each conn; make lint's dead-code check keeps these out of it).

// newTracker is a tracker without a limit, as connguard.Listener's conns
// start.
func newTracker() *tracker {
	return &tracker{limit: noLimit}
}

// pending reports how many results are queued.
func (t *tracker) pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.q) - t.head
}
