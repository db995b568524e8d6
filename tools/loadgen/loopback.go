package main

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
