package invalidate

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Limits on one purge request.
const (
	maxBody = 1 << 20
	maxURLs = 10000
	maxTags = 1000
)

// Validate checks a purge request and names what is wrong.
func (r Request) Validate() error {
	var errs []error
	if len(r.URLs) == 0 && r.Prefix == "" && len(r.Tags) == 0 {
		errs = append(errs, errors.New("nothing to purge: give urls, prefix or tags"))
	}
	if len(r.URLs) > maxURLs {
		errs = append(errs, fmt.Errorf("urls: at most %d per request (got %d)", maxURLs, len(r.URLs)))
	}
	for i, raw := range r.URLs {
		if err := checkURL(raw); err != nil {
			errs = append(errs, fmt.Errorf("urls[%d]: %w", i, err))
		}
	}
	if r.Prefix != "" && !strings.HasPrefix(r.Prefix, "/") {
		errs = append(errs, fmt.Errorf("prefix: must start with / (got %q)", r.Prefix))
	}
	if len(r.Tags) > maxTags {
		errs = append(errs, fmt.Errorf("tags: at most %d per request (got %d)", maxTags, len(r.Tags)))
	}
	for i, t := range r.Tags {
		if strings.TrimSpace(t) == "" || strings.ContainsAny(t, " \t\r\n,") {
			errs = append(errs, fmt.Errorf("tags[%d]: must be a non-empty tag without spaces or commas (got %q)", i, t))
		}
	}
	return errors.Join(errs...)
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %v", err)
	}
	switch {
	case u.Scheme == "" && u.Host == "":
		if !strings.HasPrefix(raw, "/") {
			return fmt.Errorf("must be absolute (http://host/path) or origin-form (/path?query) (got %q)", raw)
		}
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("scheme must be http or https (got %q)", u.Scheme)
	case u.Host == "":
		return fmt.Errorf("absolute URL without a host (got %q)", raw)
	}
	if u.Path == "" {
		return fmt.Errorf("URL without a path (got %q); use / for the root", raw)
	}
	return nil
}

// Handler serves POST /purge. With a purge token in the tier config it
// requires "Authorization: Bearer <token>"; without one it accepts only
// requests from loopback (the application in the same pod).
func Handler(p *Purger, cfg *tierconfig.Holder) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "purge: use POST")
			return
		}
		if status, msg := authorize(r, cfg.Load().Config.Purge.Token); status != 0 {
			writeError(w, status, msg)
			return
		}
		req, status, msg := decode(w, r)
		if status != 0 {
			writeError(w, status, msg)
			return
		}
		if err := req.Validate(); err != nil {
			writeError(w, http.StatusBadRequest, "purge: "+strings.ReplaceAll(err.Error(), "\n", "; "))
			return
		}
		res, err := p.Purge(r.Context(), req)
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			// Applied here; the shared tier failed. Safe to retry.
			w.WriteHeader(http.StatusBadGateway)
			_ = json.NewEncoder(w).Encode(struct {
				Result
				Error string `json:"error"`
			}{res, "purge: applied to this sidecar, but " + err.Error()})
			return
		}
		_ = json.NewEncoder(w).Encode(res)
	})
}

// decode reads the purge request from r's body, at most maxBody bytes.
// It returns a non-zero status and message when the body is not one JSON
// object: 413 when it is larger than maxBody, 400 otherwise.
func decode(w http.ResponseWriter, r *http.Request) (req Request, status int, msg string) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	invalid := func(err error, what string) (Request, int, string) {
		if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return req, http.StatusRequestEntityTooLarge,
				fmt.Sprintf("purge: body larger than the limit of %d bytes; split the purge into several requests", mbe.Limit)
		}
		return req, http.StatusBadRequest, "purge: invalid JSON body: " + what
	}
	if err := dec.Decode(&req); err != nil {
		return invalid(err, err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid(err, "data after the object")
	}
	return req, 0, ""
}

// authorize returns a non-zero status and message when r may not purge.
func authorize(r *http.Request, token string) (int, string) {
	if token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			return http.StatusUnauthorized, "purge: a valid bearer token is required"
		}
		return 0, ""
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return http.StatusForbidden, "purge: without a purge token, purges are accepted only from loopback"
	}
	return 0, ""
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
