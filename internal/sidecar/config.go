package sidecar

import (
	"encoding/json"
	"net/http"

	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// redactedMark replaces a secret's value in the admin /config.
const redactedMark = "REDACTED"

// runningConfig is the admin /config's answer.
type runningConfig struct {
	// Version is the config version in effect (tiercache_config_info).
	Version string `json:"version"`
	// Generation counts the data planes built since start (log lines'
	// "generation").
	Generation uint64            `json:"generation"`
	Config     tierconfig.Config `json:"config"`
}

// configHandler is the admin GET /config: the config the current
// generation runs (its source's, with the command line and the secrets
// applied), its secrets replaced by "REDACTED" (set) or left empty (unset).
// It reveals the tier's rules, L2 addresses and user: the purge token is
// required as for a purge (invalidate.Authorize).
func (dp *dataPlane) configHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeJSONError(w, http.StatusMethodNotAllowed, "config: use GET")
			return
		}
		g := dp.acquire()
		defer g.release()
		if status, msg := invalidate.Authorize(r, g.cfg.Purge.Token, "config"); status != 0 {
			writeJSONError(w, status, msg)
			return
		}
		// The secrets redacted as for logs and the config hash, and the
		// ones that are set marked so (a set one is not confused with
		// a missing one).
		c := redacted(g.cfg)
		for _, f := range []struct{ from, to *string }{
			{&g.cfg.L2.Password, &c.L2.Password}, {&g.cfg.L2.CACert, &c.L2.CACert}, {&g.cfg.Purge.Token, &c.Purge.Token},
		} {
			if *f.from != "" {
				*f.to = redactedMark
			}
		}
		var version string
		if v := dp.version.Load(); v != nil {
			version = *v
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		_ = e.Encode(runningConfig{Version: version, Generation: g.number, Config: c})
	})
}

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
