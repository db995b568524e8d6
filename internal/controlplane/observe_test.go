package controlplane

// Observers of state that only tests read (make lint's dead-code check
// keeps them out of the product).

// watchCount is the number of parked watches of tier.
func (c *tierCache) watchCount(tier string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.tiers[tier]; t != nil {
		return len(t.watches)
	}
	return 0
}

// State returns a copy of the client's state.
func (c *Client) State() ClientState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}
