package store

// Observers of unexported state that only tests read (production acts on
// the state instead; make lint's dead-code check keeps them out of it).

// current is the breaker's state.
func (b *breaker) current() breakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}
