package connguard

import "net/http"

// Middleware refuses a request whose header block the connection's
// tracker found suspicious: 400, a one-line plain-text reason and
// Connection: close, so net/http drops the connection (and anything
// pipelined or smuggled behind the request) after answering. Other
// requests go to next. Requests without a tracker in their context (not
// from Listener, or ConnContext not set) pass through unchecked.
//
// Middleware must be the outermost handler: it matches each request to a
// header block by its request line, which an inner handler may rewrite.
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := connFrom(r.Context())
		if c == nil {
			next.ServeHTTP(w, r)
			return
		}
		if c.reclaimableAt.Load() == reclaimed {
			// Read on a connection MaxConns closes to make room: no
			// answer, no handler (the client sees the close and may
			// retry); net/http closes the connection without a byte.
			panic(http.ErrAbortHandler)
		}
		t := &c.t
		v := t.take(r.ProtoMajor, requestLineHash(r.Method, r.RequestURI, r.Proto))
		if v == allowed {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		http.Error(w, v.reason(), http.StatusBadRequest)
	})
}
