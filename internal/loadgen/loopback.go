// Package loadgen is the HTTP load generator behind cmd/loadgen: closed-loop
// workers over a bounded run, latency histograms with bounded memory, the
// X-Cache distribution of the answers, per-key fetch counts (plain MISS
// answers), and the key mixes used by the benchmarks ("herd", "uniform",
// and "flood", a new key every request). Besides runs, it times one large
// GET to its first and last body byte (FetchOne) and measures how long a
// cache serves a response as fresh (ProbeFreshness). It reads the X-Cache
// values of Tiercache and of nginx's $upstream_cache_status alike.
// A run can spread its requests over several servers (replicas behind a
// Service), follow a list of them that changes while it runs (a rolling
// restart), and report itself interval by interval next to the origin's
// request counter.
//
// It sends traffic to loopback addresses only (127.0.0.0/8, ::1, localhost):
// URLs are checked before a run, and the dialer refuses any other address,
// so a redirect or a name resolving elsewhere cannot escape the machine.
package loadgen

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// ErrNotLoopback is returned for a target that is not on this machine's
// loopback interface.
var ErrNotLoopback = errors.New("not a loopback address (only 127.0.0.0/8, ::1 and localhost are allowed)")

// CheckLoopback returns an error unless raw is an http(s) URL whose host is
// localhost or a loopback IP literal. Names other than localhost are refused
// without resolving them.
func CheckLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("url %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("url %q: scheme must be http or https", raw)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("url %q: no host", raw)
	}
	if !loopbackHost(host) {
		return fmt.Errorf("url %q: %w", raw, ErrNotLoopback)
	}
	return nil
}

func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// dialControl is a net.Dialer Control hook: it runs after name resolution,
// on the address actually being connected to.
func dialControl(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Unmap().IsLoopback() {
		return fmt.Errorf("dial %s %s: %w", network, address, ErrNotLoopback)
	}
	return nil
}
