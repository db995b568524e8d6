package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store/l2"
)

func noop() {}

// TryLead decides whether this replica fetches key from the origin, when
// fetches are collapsed across the replicas of a tier: it tries to take
// key's lease in L2 for ttl, bounded by Timeout. While it holds the lease
// it renews it every ttl/3, so a short ttl bounds how long the others wait
// for a holder that died or lost Redis, without limiting how long a live
// holder's fetch may take.
//
// With no L2, with the breaker open, or when L2 fails (counted), it
// returns lead = true: fetch yourself, as without a lease. When another
// replica holds the lease it returns lead = false: wait for its fill.
// When it took the lease, release stops the renewal and gives the lease
// up; the caller must call it (any number of times; the first counts). It
// is detached from ctx's cancellation so that a client going away does not
// leave the lease to expire, and is bounded by Timeout.
func (s *Layered) TryLead(ctx context.Context, key string, ttl time.Duration) (release func(), lead bool) {
	if s.l2 == nil {
		return noop, true
	}
	var (
		token string
		ok    bool
	)
	err := s.call(ctx, s.timeout, opLease, func(ctx context.Context) (err error) {
		token, ok, err = s.l2.AcquireLease(ctx, key, ttl)
		return err
	})
	switch {
	case err != nil:
		return noop, true
	case !ok:
		return noop, false
	}
	key = strings.Clone(key)
	detached := context.WithoutCancel(ctx)
	stop := make(chan struct{})
	s.renewers.Add(1)
	go s.renew(key, token, ttl, stop)
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			// An open breaker skips this; the lease then ends with its TTL.
			_ = s.call(detached, s.timeout, opLease, func(ctx context.Context) error {
				return s.l2.ReleaseLease(ctx, key, token)
			})
		})
	}, true
}

// renew keeps a held lease alive until stop is closed, the store closes,
// or the lease is found lost.
func (s *Layered) renew(key, token string, ttl time.Duration, stop <-chan struct{}) {
	defer s.renewers.Done()
	t := time.NewTicker(max(ttl/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-s.stop:
			return
		case <-t.C:
		}
		var held bool
		err := s.call(context.Background(), s.timeout, opLease, func(ctx context.Context) (err error) {
			held, err = s.l2.ExtendLease(ctx, key, token, ttl)
			return err
		})
		if err == nil && !held {
			return
		}
	}
}

// GetNewer looks key up in L2 only (once, bounded by Timeout), passing L1
// by: a replica whose L1 holds a stale copy uses it to see whether another
// replica has stored a newer response. A stored response received after
// after is promoted into L1, decoded into e and reported as LayerL2;
// anything else is ErrNotFound (or the L2 failure, wrapping
// ErrUnavailable when L2 is absent or its breaker open).
func (s *Layered) GetNewer(ctx context.Context, key string, e *entry.Entry, after time.Time) (string, error) {
	if s.l2 == nil {
		return "", fmt.Errorf("store: get newer: %w", ErrUnavailable)
	}
	var v entry.Entry
	err := s.call(ctx, s.timeout, opGet, func(ctx context.Context) (err error) {
		v, err = s.l2.Get(ctx, key)
		return err
	})
	if errors.Is(err, l2.ErrNotFound) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", err
	}
	if v.Kind != entry.KindResponse || !v.ResponseTime.After(after) {
		return "", ErrNotFound
	}
	s.promote(key, &v)
	*e = v
	return LayerL2, nil
}
