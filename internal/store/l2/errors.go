package l2

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// IsUnavailable reports whether err means that L2 cannot serve right now —
// unreachable, slow, overloaded, loading, failing over or refusing us — as
// opposed to a miss, a caller's cancellation or a problem with one value.
// The layered store's circuit breaker counts these.
func IsUnavailable(err error) bool {
	switch {
	case err == nil,
		errors.Is(err, ErrNotFound),
		errors.Is(err, redis.Nil),
		// The caller gave up; Redis did nothing wrong.
		errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, os.ErrDeadlineExceeded),
		errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, redis.ErrPoolExhausted),
		errors.Is(err, redis.ErrClosed),
		errors.Is(err, net.ErrClosed),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE):
		return true
	}
	// Dial, DNS, timeout and other connection errors.
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	if redis.IsLoadingError(err) || // LOADING: restarting with a dataset
		redis.IsClusterDownError(err) || // CLUSTERDOWN: slots not served
		redis.IsReadOnlyError(err) || // READONLY: talking to a demoted master
		redis.IsMasterDownError(err) || // MASTERDOWN: replica lost its master
		redis.IsTryAgainError(err) || // TRYAGAIN: slot migration in progress
		redis.IsMaxClientsError(err) || // maxclients reached
		redis.IsAuthError(err) { // NOAUTH / WRONGPASS: unusable until reconfigured
		return true
	}
	// go-redis reports this one without a wrapped cause.
	return strings.Contains(err.Error(), "sentinels specified in configuration are unreachable")
}
