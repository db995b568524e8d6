package sidecar

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/store"
	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// applyFlags applies the command line to a config from any source (file,
// pod spec, last good file, control plane). --redis-addr overrides
// l2.addresses (the demo and benchmarks point a file config at their own
// Redis). The secret flags (--redis-password, --purge-token,
// --redis-ca-cert), for a standalone sidecar, fill in only what the config
// leaves empty. In a pod the secrets come from --secrets-dir instead
// (secrets.apply), which ParseArgs does not allow together with them.
func applyFlags(cfg *tierconfig.Config, o Options) {
	if o.RedisAddr != "" {
		var addrs []string
		for _, a := range strings.Split(o.RedisAddr, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		cfg.L2.Addresses = addrs
		if len(addrs) > 1 && cfg.L2.Mode == "" {
			cfg.L2.Mode = tierconfig.L2Cluster
		}
	}
	if cfg.L2.Password == "" {
		cfg.L2.Password = o.RedisPassword
	}
	if cfg.L2.CACert == "" {
		cfg.L2.CACert = o.RedisCACert
	}
	if cfg.Purge.Token == "" {
		cfg.Purge.Token = o.PurgeToken
	}
}

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

// remote adapts the L2 client and the layered store's write queue to what
// the purger needs.
type remote struct {
	c       *l2.Client
	st      *store.Layered
	publish prometheus.Counter // l2_errors_total{op="publish"}
}

func (r remote) Forget(keys ...string) { r.st.Forget(keys...) }
func (r remote) ForgetAll()            { r.st.ForgetAll() }

func (r remote) Delete(ctx context.Context, keys ...string) (int, error) {
	return r.c.DeleteCount(ctx, keys...)
}
func (r remote) PurgeTags(ctx context.Context, tags []string) (int, error) {
	return r.c.PurgeTags(ctx, tags)
}
func (r remote) PurgeMatching(ctx context.Context, match func(string, *entry.Entry) bool) (int, error) {
	return r.c.PurgeMatching(ctx, match)
}
func (r remote) ExpireKeys(ctx context.Context, at time.Time, keys []string, match func(string, *entry.Entry) bool) (int, error) {
	return r.st.ExpireL2Keys(ctx, at, keys, match)
}
func (r remote) ExpireTags(ctx context.Context, at time.Time, tags []string, match func(string, *entry.Entry) bool) (int, error) {
	return r.st.ExpireL2Tags(ctx, at, tags, match)
}
func (r remote) ExpireMatching(ctx context.Context, at time.Time, match func(string, *entry.Entry) bool) (int, error) {
	return r.st.ExpireL2Matching(ctx, at, match)
}
func (r remote) NextSeq(ctx context.Context) (uint64, error)   { return r.c.NextSeq(ctx) }
func (r remote) Seq(ctx context.Context) (uint64, bool, error) { return r.c.Seq(ctx) }
func (r remote) Publish(ctx context.Context, msg []byte) error {
	err := r.c.Publish(ctx, msg)
	if err != nil {
		r.publish.Inc()
	}
	return err
}

// instanceID names this sidecar in invalidation messages: the pod, plus a
// random suffix so that a restarted container is told apart from its
// predecessor.
func instanceID(o Options) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return o.PodNamespace + "/" + o.PodName + "#" + hex.EncodeToString(b[:])
}

// listen subscribes to the tier's invalidations and, once subscribed (so
// that nothing purged during the preload is missed), preloads L1 from L2.
// ready is set when the preload has ended, successfully or not, bounded by
// the warm-start timeout; subscribed is closed at the first subscription. Both goroutines are owned by wg and end with ctx.
// Every subscription after the first follows a lost one (messages may
// have been missed; L1 is cleared unless the sequence shows none was): it is counted as
// l2_errors_total{op="subscribe"}.
func listen(ctx context.Context, wg *sync.WaitGroup, client *l2.Client, st *store.Layered,
	purger *invalidate.Purger, ws tierconfig.WarmStart, ready *atomic.Bool, subscribed chan struct{},
	lost prometheus.Counter, log *slog.Logger) {
	var once sync.Once
	wg.Add(2)
	go func() {
		defer wg.Done()
		err := client.Subscribe(ctx, purger.HandleMessage, func(since time.Time) {
			purger.Subscribed(ctx, since)
			first := false
			once.Do(func() { first = true; close(subscribed) })
			if !first {
				lost.Inc()
			}
		})
		if err != nil && ctx.Err() == nil {
			log.Error("invalidation subscription ended", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		defer ready.Store(true)
		if ws.Disabled {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, ws.Timeout.Std())
		defer cancel()
		select {
		case <-subscribed:
		case <-wctx.Done():
			if ctx.Err() == nil { // not shutting down: the timeout passed
				log.Warn("warm start skipped: not subscribed to invalidations in time", "timeout", ws.Timeout.String())
			}
			return
		}
		n, err := st.WarmStart(wctx, ws.MaxEntries, int64(ws.MaxBytes))
		if err != nil {
			log.Warn("warm start ended early", "loaded", n, "err", err)
			return
		}
		log.Info("warm start", "loaded", n)
	}()
}
