package proxy

import "net/http"

// stripTargeted removes the tier's targeted cache-control fields (RFC 9213,
// tierconfig defaults.targetedCacheControl.strip) from a header about to go
// to a client. names is Compiled.StripTargeted: canonical, nil when the
// tier forwards them, so the usual case costs nothing. Stored entries keep
// the fields: only what clients see changes.
func stripTargeted(h http.Header, names []string) {
	for _, name := range names {
		delete(h, name)
	}
}
