package httpcache

import (
	"net/http"
	"net/textproto"
	"strings"
)

// RemoveHopByHop deletes the hop-by-hop fields (RFC 9110 §7.6.1): those
// named by Connection, plus Connection, Keep-Alive, Proxy-Connection, TE,
// Transfer-Encoding, Upgrade, Trailer, Proxy-Authenticate and
// Proxy-Authorization. Keys are compared in canonical form, so a key put
// into the map directly in another case goes too.
func RemoveHopByHop(h http.Header) {
	connection := h.Values("Connection")
	for name := range h {
		canon := textproto.CanonicalMIMEHeaderKey(name)
		if isHopByHop(canon) || namedByConnection(connection, canon) {
			delete(h, name)
		}
	}
}

// NamesFields reports whether the Connection field lines name any field
// besides the connection options keep-alive and close, which name only
// hop-by-hop fields anyway: only then does RemoveHopByHop remove a field a
// cache key could depend on. It does not allocate.
func NamesFields(connection []string) bool {
	for _, line := range connection {
		for rest := line; rest != ""; {
			var tok string
			tok, rest, _ = strings.Cut(rest, ",")
			tok = strings.Trim(tok, " \t")
			if tok != "" && !strings.EqualFold(tok, "keep-alive") && !strings.EqualFold(tok, "close") {
				return true
			}
		}
	}
	return false
}

// isHopByHop reports whether canon (a canonical name) is one of the fixed
// hop-by-hop fields.
func isHopByHop(canon string) bool {
	switch canon {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Transfer-Encoding", "Upgrade", "Trailer",
		"Proxy-Authenticate", "Proxy-Authorization":
		return true
	}
	return false
}
