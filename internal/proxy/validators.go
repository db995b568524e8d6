package proxy

import (
	"net/http"
	"slices"

	"github.com/tiercache/tiercache/internal/httpcache"
)

// forwardsValidators reports whether c's fill sends the client's
// validators (If-None-Match, If-Modified-Since) to the origin: the tier
// forwards them (defaults.forwardClientValidators), the client sent one,
// and nothing is stored for the request (httpcache.ForwardedValidators;
// a stored part, whose missing run the fill asks for, counts as stored).
func forwardsValidators(c *call, r *http.Request) bool {
	stored := c.stale != nil || (c.rng != nil && c.rng.part != nil)
	return len(httpcache.ForwardedValidators(r.Header, c.cfg.Config.Defaults.ForwardClientValidators, stored)) > 0
}

// forwardValidators copies the client's validators that a fill forwards
// from the client's header into the origin request's out (strict mode's
// allowlist does not apply to them: the tier chose to forward them).
func forwardValidators(out, client http.Header) {
	for _, k := range httpcache.ForwardedValidators(client, true, false) {
		out[k] = slices.Clone(client[k])
	}
}

// conditionalMiss serves a miss whose fill would forward the client's
// validators. Its origin may answer 304, which serves nobody else, so it
// leads no collapsed fetch: it joins one already running for the key
// (whose full response answers its conditional) or fetches on its own,
// and requests without validators do not queue behind it.
func (p *Proxy) conditionalMiss(w http.ResponseWriter, r *http.Request, c *call) outcome {
	if f := p.flights.Running(c.key); f != nil {
		return p.wait(w, r, c, f)
	}
	return p.fill(w, r, c, nil)
}
