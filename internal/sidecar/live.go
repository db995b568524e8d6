package sidecar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tiercache/tiercache/internal/controlplane"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Apply puts a config pushed by the control plane into effect; an error
// makes the client NACK it, and the config in effect stays. The command
// line and the secrets directory apply to it as to every other source
// (effective). A change of rules, defaults, origin, coalescing or purge
// settings swaps the compiled config only: each request keeps the config
// it started with. A change of the L1 parameters or of the L2 connection
// builds a new data-plane generation (see generation) and retires the old
// one once its requests have ended. A config equal in effect to the one
// in force changes nothing. Apply is called from the client's goroutine,
// one at a time; secret rotations are serialised with it.
func (dp *dataPlane) Apply(_ context.Context, cfg tierconfig.Config, version string) error {
	if err := checkKeyPrefix(cfg.L2, dp.o); err != nil {
		return err
	}
	dp.applyMu.Lock()
	defer dp.applyMu.Unlock()
	what, compiled, err := dp.install(dp.effective(cfg, dp.sec))
	if err != nil {
		return err
	}
	dp.base = cfg
	dp.setVersion(version)
	if strings.Contains(what, "l2") {
		dp.warnUnauthenticated(compiled)
	}
	if what == "" {
		dp.log.Debug("config unchanged in effect", "version", version)
		return nil
	}
	dp.log.Info("config applied", "version", version, "hash", redacted(compiled.Config).Hash(), "rebuilt", what,
		"generation", dp.cur.Load().number)
	return nil
}

// effective is base with the command line and, with --secrets-dir, the
// secrets s applied: the config the data plane runs.
func (dp *dataPlane) effective(base tierconfig.Config, s secrets) tierconfig.Config {
	return effective(base, dp.o, s)
}

func effective(base tierconfig.Config, o Options, s secrets) tierconfig.Config {
	applyFlags(&base, o)
	if o.SecretsDir != "" {
		s.apply(&base)
	}
	return base
}

// install puts the effective config cfg into effect (see Apply) and
// returns what changed: "" (nothing in effect), "rules" (the compiled
// config only) or the rebuilt parts ("l1", "l2", "l1,l2"). The caller
// holds applyMu.
func (dp *dataPlane) install(cfg tierconfig.Config) (string, *tierconfig.Compiled, error) {
	cur := dp.holder.Load()
	if cfg.WithDefaults().Hash() == cur.Hash {
		return "", cur, nil
	}
	compiled, err := tierconfig.Compile(cfg)
	if err != nil {
		return "", nil, err
	}
	prev := dp.cur.Load()
	l1Changed := compiled.Config.L1 != prev.l1cfg
	l2Changed := !sameL2(compiled.Config.L2, prev.l2cfg)
	var rebuilt []string
	if l1Changed {
		rebuilt = append(rebuilt, "l1")
	}
	if l2Changed {
		rebuilt = append(rebuilt, "l2")
	}
	if len(rebuilt) == 0 {
		dp.holder.Store(compiled)
		return "rules", compiled, nil
	}
	next, err := dp.build(compiled, prev, nil)
	if err != nil {
		return "", nil, err
	}
	// Requests still on the old generation may meet the new rules: the
	// proxy checks for itself what it needs of the config (cluster-wide
	// coalescing without L2 is off).
	dp.holder.Store(compiled)
	dp.swap(prev, next)
	if l1Changed && compiled.Config.L1.MaxSize != prev.l1cfg.MaxSize {
		dp.setMemoryLimit(compiled.Config.L1.MaxSize)
	}
	return strings.Join(rebuilt, ","), compiled, nil
}

// setSecrets puts rotated secrets into effect, live: a new invalidation
// key signs at once (the previous one stays valid for
// invalidate.KeyGrace); a new purge token is required from the next
// purge on; a new Redis password or CA builds a new generation whose L2
// client connects with them, while requests in flight finish on the old
// one, which is then closed with its connections. Nothing of the values
// is logged: only which files changed.
func (dp *dataPlane) setSecrets(s secrets) {
	dp.applyMu.Lock()
	defer dp.applyMu.Unlock()
	changed := dp.sec.changed(s)
	if len(changed) == 0 {
		return
	}
	if dp.keys.Set([]byte(s.invalidationKey), time.Now()) {
		dp.log.Info("invalidation key changed; the previous one stays valid for the grace period",
			"grace", invalidate.KeyGrace.String(), "set", s.invalidationKey != "")
		dp.warnUnauthenticated(dp.holder.Load())
	}
	what, _, err := dp.install(dp.effective(dp.base, s))
	if err != nil {
		dp.log.Error("secrets changed but cannot be applied; the ones in effect stay", "changed", changed, "err", err)
		return
	}
	dp.sec = s
	dp.log.Info("secrets applied", "changed", changed, "rebuilt", what, "generation", dp.cur.Load().number)
}

// warnUnauthenticated warns when the tier's invalidation channel is
// unauthenticated: with L2 or the control plane's relay and no
// invalidation key, anyone who can publish on the channel can empty the
// L1 of every sidecar of the tier.
func (dp *dataPlane) warnUnauthenticated(c *tierconfig.Compiled) {
	if (len(c.Config.L2.Addresses) > 0 || dp.relay != nil) && !dp.keys.Enabled() {
		dp.log.Warn("the invalidation channel is unauthenticated: no invalidation key (--secrets-dir " + fileInvalidationKey + "); anyone who can publish on it can purge every sidecar's L1")
	}
}

// setVersion records the tier config version in effect (config_info).
func (dp *dataPlane) setVersion(v string) {
	if old := dp.version.Load(); old != nil && *old == v {
		return
	}
	dp.version.Store(&v)
	dp.m.SetConfig(v)
}

// setMemoryLimit sets the Go soft memory limit for an L1 of maxSize when
// --memory-limit is auto (see memoryLimit).
func (dp *dataPlane) setMemoryLimit(maxSize tierconfig.Size) {
	if dp.o.MemoryLimit != "auto" {
		return
	}
	limit, err := memoryLimit(dp.o.MemoryLimit, dp.getenv("GOMEMLIMIT"), maxSize)
	if err != nil || limit <= 0 || dp.soft == nil {
		return
	}
	dp.soft.setFloor(limit)
	dp.log.Info("memory limit set", "floor", limit, "bytes", dp.soft.limit(), "l1_max_size", maxSize.String())
}

// lastGoodPath is where the control-plane client keeps the last config it
// applied ("" without --state-dir).
func lastGoodPath(o Options) string {
	if o.StateDir == "" {
		return ""
	}
	return filepath.Join(o.StateDir, LastGoodFile)
}

// newControlPlaneClient returns the client of --control-plane for dp.
// initial is the config the sidecar started with, from source: when that
// is the last good file, its version is the one in effect and is not
// applied again; any other source's config is replaced by the first push.
func newControlPlaneClient(o Options, dp *dataPlane, initial tierconfig.Config, source string, reg prometheus.Registerer) (*controlplane.Client, error) {
	opts := controlplane.ClientOptions{
		Target:       o.ControlPlane,
		Namespace:    o.PodNamespace,
		Pod:          o.PodName,
		Tier:         o.Tier,
		Apply:        dp.Apply,
		LastGoodPath: lastGoodPath(o),
		Registerer:   reg,
		Logger:       dp.log,
		TokenFile:    o.ControlPlaneTokenFile,
	}
	dial, err := controlPlaneDialOptions(o)
	if err != nil {
		return nil, err
	}
	opts.DialOptions = dial
	if dial == nil && o.ControlPlaneTokenFile != "" {
		dp.log.Warn("control plane: plaintext connection: the token is sent unencrypted (give --control-plane-ca or --control-plane-ca-pem)")
	}
	if opts.LastGoodPath != "" {
		if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("--state-dir: %w", err)
		}
		if source == opts.LastGoodPath {
			opts.InitialVersion = controlplane.Version(initial)
		}
	}
	c, err := controlplane.NewClient(opts)
	if err != nil {
		return nil, fmt.Errorf("--control-plane: %w", err)
	}
	return c, nil
}

// controlPlaneDialOptions are the gRPC options of every connection to the
// control plane: TLS when a CA is given (nil: plaintext).
func controlPlaneDialOptions(o Options) ([]grpc.DialOption, error) {
	if o.ControlPlaneCA == "" && o.ControlPlaneCAPEM == "" {
		return nil, nil
	}
	creds, err := controlPlaneTLS(o.ControlPlaneCA, o.ControlPlaneCAPEM, o.ControlPlane)
	if err != nil {
		return nil, err
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(creds)}, nil
}

// controlPlaneTLS returns TLS credentials that trust only the CA in
// caFile, or else caPEM, and check the server's name against target's
// host.
func controlPlaneTLS(caFile, caPEM, target string) (credentials.TransportCredentials, error) {
	pem, where := []byte(caPEM), "--control-plane-ca-pem"
	if caFile != "" {
		var err error
		if pem, err = os.ReadFile(caFile); err != nil {
			return nil, fmt.Errorf("--control-plane-ca: %w", err)
		}
		where = "--control-plane-ca " + caFile
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", where)
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("--control-plane: %w", err)
	}
	return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: host}), nil
}
