package sidecar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// keyPrefix is the tier's Redis key prefix, tc:<namespace>/<tier>: from
// the sidecar's identity (DESIGN.md), default/default for a standalone
// sidecar without one, so tiers sharing one Redis never read each
// other's entries. A config cannot choose it (checkKeyPrefix).
func keyPrefix(o Options) string {
	ns, tier := o.PodNamespace, o.Tier
	if ns == "" {
		ns = "default"
	}
	if tier == "" {
		tier = "default"
	}
	return tierconfig.KeyPrefix(ns, tier)
}

// checkKeyPrefix refuses a config whose l2.keyPrefix names a prefix other
// than the sidecar's own.
func checkKeyPrefix(l tierconfig.L2, o Options) error {
	return l.CheckKeyPrefix(keyPrefix(o))
}

// openL2 builds the Redis client for cfg (no network I/O yet).
func openL2(cfg tierconfig.L2, o Options, log *slog.Logger) (*l2.Client, error) {
	c := l2.Config{
		Addrs:      cfg.Addresses,
		Mode:       cfg.Mode,
		MasterName: cfg.MasterName,
		Username:   cfg.Username,
		Password:   cfg.Password,
		Prefix:     keyPrefix(o),
		Timeout:    cfg.Timeout.Std(),
	}
	if cfg.TLS {
		t := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.CACert != "" {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM([]byte(cfg.CACert)) {
				return nil, errors.New("l2.caCert: no PEM certificate found")
			}
			t.RootCAs = pool
		}
		c.TLS = t
	}
	// go-redis has one process-wide logger; every sidecar in a process
	// logs the same way, so setting it here is idempotent.
	redis.SetLogger(redisLog{log})
	client, err := l2.New(c)
	if err != nil {
		return nil, fmt.Errorf("l2: %w", err)
	}
	return client, nil
}

// redisLog routes go-redis's own log lines (dial failures and the like)
// into the sidecar's structured log at debug level: L2 trouble is reported
// by the breaker's state changes and the l2 metrics, once, not per dial.
type redisLog struct{ log *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.log.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}
