package invalidate

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

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
	switch {
	case r.All && (len(r.URLs) > 0 || r.Prefix != "" || len(r.Tags) > 0):
		errs = append(errs, errors.New(`all: purges everything and must be given alone (without urls, prefix or tags)`))
	case r.All:
	case len(r.URLs) == 0 && r.Prefix == "" && len(r.Tags) == 0:
		errs = append(errs, errors.New(`nothing to purge: give urls, prefix, tags, or "all": true`))
	case r.Prefix == "/":
		errs = append(errs, errors.New(`prefix: "/" would purge everything; send {"all": true} to mean that`))
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

// Purge request outcomes, as counted by HandlerOptions.Count.
const (
	ResultPurged       = "purged"       // applied (200)
	ResultFailed       = "failed"       // applied here, L2 or fan-out failed (502)
	ResultUnauthorized = "unauthorized" // no or wrong token, or not from the pod (401, 403)
	ResultLimited      = "limited"      // over the rate limit (429)
	ResultInvalid      = "invalid"      // not a valid purge request (400, 405, 413)
)

// HandlerOptions are what a purge handler shares with the sidecar's other
// purge handlers (one per data-plane generation): the rate limit and the
// counter.
type HandlerOptions struct {
	// Limit bounds the rate of authorized purges; nil: no limit.
	Limit *Limiter
	// Count, when set, is called once per request with its Result*.
	Count func(result string)
}

// Handler serves POST /purge. With a purge token in the tier config it
// requires "Authorization: Bearer <token>"; without one it accepts only
// requests from exactly 127.0.0.1 or ::1 (the application in the same
// pod; not the rest of 127.0.0.0/8, from which a service mesh's proxy
// forwards other pods' traffic). Authorized purges are then rate-limited.
func Handler(p *Purger, cfg *tierconfig.Holder, o HandlerOptions) http.Handler {
	a := newApplier(p, o)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			a.count(ResultInvalid)
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "purge: use POST")
			return
		}
		if status, msg := authorize(r, cfg.Load().Config.Purge.Token); status != 0 {
			a.count(ResultUnauthorized)
			writeError(w, status, msg)
			return
		}
		req, status, msg := decode(w, r)
		if status != 0 {
			a.count(ResultInvalid)
			writeError(w, status, msg)
			return
		}
		a.apply(w, r, req)
	})
}

// applier is what every purge handler does once a request is authorized
// and read: validate it, spend the rate limit, purge, and answer.
type applier struct {
	p     *Purger
	limit *Limiter
	count func(result string)
}

func newApplier(p *Purger, o HandlerOptions) applier {
	a := applier{p: p, limit: o.Limit, count: o.Count}
	if a.count == nil {
		a.count = func(string) {}
	}
	return a
}

// apply validates req, takes its cost from the rate limit and purges,
// answering with the Result (200), or the error: 400 for an invalid
// request, 429 over the limit, 502 when the shared tier failed.
func (a applier) apply(w http.ResponseWriter, r *http.Request, req Request) {
	if err := req.Validate(); err != nil {
		a.count(ResultInvalid)
		writeError(w, http.StatusBadRequest, "purge: "+strings.ReplaceAll(err.Error(), "\n", "; "))
		return
	}
	// Only authorized, valid purges spend the budget: a client without
	// the token cannot starve the application's own purges.
	if wait := a.limit.take(req.All); wait > 0 {
		a.count(ResultLimited)
		w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("purge: rate limit of this sidecar reached (%s); retry after %s, or batch URLs and tags into fewer requests", a.limit, wait.Round(time.Millisecond)))
		return
	}
	res, err := a.p.Purge(r.Context(), req)
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		a.count(ResultFailed)
		// Applied here; the shared tier failed. Safe to retry.
		w.WriteHeader(http.StatusBadGateway)
		_ = json.NewEncoder(w).Encode(struct {
			Result
			Error string `json:"error"`
		}{res, "purge: applied to this sidecar, but " + err.Error()})
		return
	}
	a.count(ResultPurged)
	_ = json.NewEncoder(w).Encode(res)
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
		if ute, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && ute.Field != "" {
			return req, http.StatusBadRequest, fmt.Sprintf("purge: %s: must be %s (got a JSON %s)", ute.Field, jsonType(ute.Type), ute.Value)
		}
		return invalid(err, err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid(err, "data after the object")
	}
	return req, 0, ""
}

// jsonType names what JSON value decodes into t, for errors.
func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(jsonType(t.Elem()), "a ") + "s"
	}
	return "a " + t.String()
}

// authorize returns a non-zero status and message when r may not purge.
func authorize(r *http.Request, token string) (int, string) {
	return Authorize(r, token, "purge")
}

// Authorize returns a non-zero status and message when r may not use the
// admin endpoint named what: with a token, r must carry it as
// "Authorization: Bearer <token>"; without one, r must come from exactly
// 127.0.0.1 or ::1. The purge token guards every admin endpoint that acts
// or reveals (purges, the running config).
func Authorize(r *http.Request, token, what string) (int, string) {
	if token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			return http.StatusUnauthorized, what + ": a valid bearer token is required"
		}
		return 0, ""
	}
	if !fromPodLoopback(r.RemoteAddr) {
		return http.StatusForbidden, what + ": without a purge token, this is accepted only from 127.0.0.1 or ::1; set a purge token to reach it from elsewhere"
	}
	return 0, ""
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// fromPodLoopback reports whether addr (a RemoteAddr) is exactly 127.0.0.1
// or ::1. The rest of 127.0.0.0/8 does not count: Istio's sidecar forwards
// inbound mesh traffic from 127.0.0.6, so "loopback" would admit every
// peer of the mesh.
func fromPodLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	return ip == netip.AddrFrom4([4]byte{127, 0, 0, 1}) || ip == netip.IPv6Loopback()
}
