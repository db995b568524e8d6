package httpcache

// ForwardedValidators returns the names of the client's validator fields
// (If-None-Match, If-Modified-Since) that a cache fill sends to the origin
// with the client's values; nil when it sends none.
//
// A fill normally withholds them, with the client's If-Range and Range:
// it asks for the full response so that it can store it, and answers the
// client's conditional from that response itself (RFC 9111 §4.3.2 leaves
// forwarding to the cache). A tier that forwards them (forward) does so
// only when nothing is stored for the request (stored false): with a
// stored response the fill validates the cache's own copy, whose
// validators it sends instead, and a 304 then refreshes that copy. A 304
// the origin gives to the client's own validators describes a response
// the cache does not have: it is passed through and not stored.
func ForwardedValidators(req Header, forward, stored bool) []string {
	if !forward || stored {
		return nil
	}
	var names []string
	for _, name := range [...]string{"If-None-Match", "If-Modified-Since"} {
		if len(values(req, name)) > 0 {
			names = append(names, name)
		}
	}
	return names
}
