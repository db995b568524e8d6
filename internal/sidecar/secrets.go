package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Files of --secrets-dir: the tier's projected Secret volume, which the
// operator mounts at /var/run/secrets/tiercache (the names are fixed with
// internal/operator/inject/names.go).
const (
	fileRedisPassword   = "redis-password"
	fileRedisCA         = "redis-ca.crt"
	filePurgeToken      = "purge-token"
	fileInvalidationKey = "invalidation-key"
)

// secretsPoll re-reads the secrets directory this often whatever the
// watch reports: a safety net for a missed event.
const secretsPoll = 30 * time.Second

// secretsSettle is how long the directory must be quiet after an event
// before it is re-read: the kubelet's update is several operations (a new
// timestamped directory, the ..data swap, the old directory removed), and
// a read in the middle of them could see a file as missing for a moment.
const secretsSettle = 100 * time.Millisecond

// secrets are the values of --secrets-dir. A missing file is an unset
// secret. They live in memory only: merged into the effective config (and
// the invalidation keyring), never into what is logged, hashed,
// persisted or sent to the control plane (see redacted).
type secrets struct {
	redisPassword   string
	redisCA         string
	purgeToken      string
	invalidationKey string
}

// readSecrets reads dir. The password, token and key lose trailing
// newlines (a Secret created from a file often ends in one); the CA
// bundle is PEM and kept as it is. A file that exists but cannot be read
// is an error naming it.
func readSecrets(dir string) (secrets, error) {
	var s secrets
	var errs []error
	read := func(name string, trim bool) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return ""
		case err != nil:
			errs = append(errs, fmt.Errorf("--secrets-dir: %s: %w", name, err))
			return ""
		}
		if trim {
			return strings.TrimRight(string(b), "\r\n")
		}
		return string(b)
	}
	s.redisPassword = read(fileRedisPassword, true)
	s.redisCA = read(fileRedisCA, false)
	s.purgeToken = read(filePurgeToken, true)
	s.invalidationKey = read(fileInvalidationKey, true)
	return s, errors.Join(errs...)
}

// apply puts the secrets into cfg; with --secrets-dir they replace what
// the config or the flags say, unset ones included.
func (s secrets) apply(cfg *tierconfig.Config) {
	cfg.L2.Password = s.redisPassword
	cfg.L2.CACert = s.redisCA
	cfg.Purge.Token = s.purgeToken
}

// changed names the secrets that differ between s and t (names only,
// never values), for the log.
func (s secrets) changed(t secrets) []string {
	var names []string
	for _, f := range []struct {
		name string
		a, b string
	}{
		{fileRedisPassword, s.redisPassword, t.redisPassword},
		{fileRedisCA, s.redisCA, t.redisCA},
		{filePurgeToken, s.purgeToken, t.purgeToken},
		{fileInvalidationKey, s.invalidationKey, t.invalidationKey},
	} {
		if f.a != f.b {
			names = append(names, f.name)
		}
	}
	return names
}

// redacted is cfg without secret values: what may be logged or hashed for
// tiercache_config_info.
func redacted(cfg tierconfig.Config) tierconfig.Config {
	cfg.L2.Password, cfg.L2.CACert, cfg.Purge.Token = "", "", ""
	return cfg
}

// secretsWatch watches --secrets-dir and calls update with its contents
// after every change the watch reports and every poll. The kubelet
// updates a projected volume by swapping its ..data symlink, so the
// directory is watched, not the files, and every event re-reads them
// all; update compares. A read that fails is logged (once per distinct
// error) and retried on the next event or poll; the secrets in effect
// stay.
type secretsWatch struct {
	w      *fsnotify.Watcher
	dir    string
	poll   time.Duration
	settle time.Duration
	update func(secrets)
	log    *slog.Logger
}

// newSecretsWatch starts watching dir; run delivers the changes.
func newSecretsWatch(dir string, poll time.Duration, update func(secrets), log *slog.Logger) (*secretsWatch, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("--secrets-dir: watching: %w", err)
	}
	if err := w.Add(dir); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("--secrets-dir: watching %s: %w", dir, err)
	}
	return &secretsWatch{w: w, dir: dir, poll: poll, settle: secretsSettle, update: update, log: log}, nil
}

// run delivers changes until ctx ends, then closes the watch. An event
// re-reads the directory once it has been quiet for settle.
func (sw *secretsWatch) run(ctx context.Context) {
	defer sw.w.Close()
	t := time.NewTicker(sw.poll)
	defer t.Stop()
	settled := time.NewTimer(sw.settle)
	settled.Stop()
	defer settled.Stop()
	lastErr := ""
	reread := func() {
		s, err := readSecrets(sw.dir)
		if err != nil {
			if err.Error() != lastErr {
				sw.log.Warn("secrets not re-read; the ones in effect stay", "err", err)
				lastErr = err.Error()
			}
			return
		}
		lastErr = ""
		sw.update(s)
	}
	// A change between the start-up read and the watch is seen now.
	reread()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-sw.w.Events:
			if !ok {
				return
			}
			settled.Reset(sw.settle)
		case <-settled.C:
			reread()
		case err, ok := <-sw.w.Errors:
			if !ok {
				return
			}
			sw.log.Warn("watching the secrets directory", "err", err)
		case <-t.C:
			reread()
		}
	}
}
