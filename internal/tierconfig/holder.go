package tierconfig

import "sync/atomic"

// Holder holds the config in effect and swaps it atomically: the request
// path Loads once per request and keeps using what it got, while a new
// config is Stored from the control-plane client.
type Holder struct{ p atomic.Pointer[Compiled] }

// NewHolder returns a Holder serving c.
func NewHolder(c *Compiled) *Holder {
	h := &Holder{}
	h.p.Store(c)
	return h
}

// Load returns the config in effect.
func (h *Holder) Load() *Compiled { return h.p.Load() }

// Store swaps in c.
func (h *Holder) Store(c *Compiled) { h.p.Store(c) }
