// Package sidecar wires the sidecar process: flags (each also readable from
// TIERCACHE_<FLAG>), the tier config, L1, the proxy, the purger, metrics,
// the serving and admin servers, and graceful shutdown. With
// --control-plane it also runs the control-plane client and applies pushed
// configs live (live.go), rebuilding only the parts of the data plane a
// config changes (generation.go). cmd/sidecar only calls Run, so tests
// drive the whole process in-process with their own arguments.
package sidecar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tiercache/tiercache/internal/accesslog"
	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/connguard"
	"github.com/tiercache/tiercache/internal/controlplane"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/proxy"
	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/internal/version"
)

// Options are the parsed command line.
type Options struct {
	Listen          string
	Upstream        string
	AdminListen     string
	ConfigFile      string
	Tier            string
	PodName         string
	PodNamespace    string
	LogLevel        string
	LogFormat       string
	ShutdownTimeout time.Duration
	DrainDelay      time.Duration
	MaxHeaderBytes  int
	MemoryLimit     string
	RedisAddr       string
	RedisPassword   string
	RedisCACert     string
	PurgeToken      string
	SecretsDir      string
	InitialConfig   string
	StateDir        string
	ControlPlane    string
	ControlPlaneCA  string
	// ControlPlaneCAPEM is the CA itself (the operator injects it as
	// TIERCACHE_CONTROL_PLANE_CA_PEM); ControlPlaneTokenFile the
	// projected ServiceAccount token sent to the control plane.
	ControlPlaneCAPEM     string
	ControlPlaneTokenFile string
	// Limits of upgraded (WebSocket) connections.
	MaxUpgraded        int
	MaxConns           int
	UpgradeIdleTimeout time.Duration
	// SendTimeout closes a client connection that takes no byte of a
	// response for this long (connguard.SendTimeout; nginx's
	// send_timeout).
	SendTimeout time.Duration
	// DrainToken lets the pod's preStop hook drain the sidecar before
	// the app gets SIGTERM (drain.go); "" refuses every such call.
	DrainToken string
	// Rate limit of admin purges.
	PurgeRate  float64
	PurgeBurst int
	// BodyDir is the directory of the body store ("": none, bodies above
	// l1.maxEntrySize stream through uncached). BodyDirSize is its budget
	// in bytes: as given by --body-dir-size after ParseArgs (0 =
	// automatic), resolved by RunWith before the data plane is built (90%
	// of the free space when automatic), so the data plane always sees a
	// positive size with a BodyDir.
	BodyDir     string
	BodyDirSize int64
	// AdminPprof serves net/http/pprof's profiles on the admin port.
	AdminPprof bool
	// AccessLog is the access log's default (--access-log,
	// --access-log-sample-percent, --access-log-exclude): what applies
	// where the tier's accessLog says nothing.
	AccessLog accesslog.Defaults
	// ShowVersion (--version) prints the version and exits: nothing else
	// is read or checked.
	ShowVersion bool
}

// ParseArgs parses args; every flag may also come from the environment as
// TIERCACHE_<FLAG> (upper case, dashes as underscores). The command line
// wins over the environment.
func ParseArgs(args []string, getenv func(string) string, stderr io.Writer) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("tiercache-sidecar", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Listen, "listen", ":8080", "serving address")
	fs.StringVar(&o.Upstream, "upstream", "", "origin base URL, e.g. http://127.0.0.1:8081 (required)")
	fs.StringVar(&o.AdminListen, "admin-listen", ":9090", "admin address: /metrics, /healthz, /readyz, /purge")
	fs.StringVar(&o.ConfigFile, "config", "", "tier config file (YAML or JSON); none = built-in defaults")
	fs.StringVar(&o.RedisAddr, "redis-addr", "", "L2 Redis address(es), comma separated (overrides l2.addresses); none = L1 only")
	fs.StringVar(&o.RedisPassword, "redis-password", "", "L2 Redis password when the config sets none (prefer TIERCACHE_REDIS_PASSWORD)")
	fs.StringVar(&o.RedisCACert, "redis-ca-cert", "", "PEM CA bundle for L2 TLS when the config sets none (prefer TIERCACHE_REDIS_CA_CERT)")
	fs.StringVar(&o.PurgeToken, "purge-token", "", "purge token when the config sets none (prefer TIERCACHE_PURGE_TOKEN)")
	fs.StringVar(&o.SecretsDir, "secrets-dir", "", "directory of the tier's secrets (redis-password, redis-ca.crt, purge-token, invalidation-key; a missing file is unset), watched and applied live; not with the secret flags")
	fs.StringVar(&o.InitialConfig, "initial-config", "", "tier config as text (YAML or JSON): the config the operator places in the pod spec; not with --config")
	fs.StringVar(&o.StateDir, "state-dir", "", "directory for the last good config (an emptyDir in the pod); its config.json is preferred at start")
	fs.StringVar(&o.ControlPlaneCA, "control-plane-ca", "", "PEM file of the CA that signs the control plane's certificate: connect with TLS (default plaintext)")
	fs.StringVar(&o.ControlPlaneCAPEM, "control-plane-ca-pem", "", "PEM CA of the control plane's certificate, as text (the operator injects TIERCACHE_CONTROL_PLANE_CA_PEM): connect with TLS; not with --control-plane-ca")
	fs.StringVar(&o.ControlPlaneTokenFile, "control-plane-token-file", "", "file holding the token sent to the control plane as \"authorization: Bearer <token>\" (a projected ServiceAccount token, re-read on every reconnect)")
	fs.StringVar(&o.ControlPlane, "control-plane", "", "operator xDS address (host:port) for live config; needs --tier, --pod-name, --pod-namespace; none = static config")
	fs.StringVar(&o.Tier, "tier", "", "CacheTier name (identity sent to the control plane)")
	fs.StringVar(&o.PodName, "pod-name", "", "pod name (identity)")
	fs.StringVar(&o.PodNamespace, "pod-namespace", "", "pod namespace (identity)")
	fs.StringVar(&o.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.LogFormat, "log-format", "json", "json or text")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", 25*time.Second, "how long in-flight requests may take to finish on SIGTERM")
	fs.DurationVar(&o.DrainDelay, "drain-delay", 0, "on SIGTERM or the drain hook, keep serving this long with /readyz failing and keep-alives off (every response says Connection: close) before shutting down, so that endpoints update and clients move first")
	fs.StringVar(&o.DrainToken, "drain-token", "", "bearer token of GET /drain on the admin port, which the pod's preStop hook calls to drain the sidecar while the app still runs (prefer TIERCACHE_DRAIN_TOKEN; the operator injects a random one per pod); empty: /drain refuses every call")
	fs.IntVar(&o.MaxHeaderBytes, "max-header-bytes", 64<<10, "largest request header block; larger gets 431")
	fs.IntVar(&o.MaxConns, "max-connections", connguard.DefaultMaxConns, "most client connections open at once on --listen, upgraded ones included (0: no bound); at the bound the connection waiting longest for a request (idle keep-alive, or new and silent for 1s) is closed to make room, else new ones wait")
	fs.IntVar(&o.MaxUpgraded, "max-upgraded-connections", proxy.DefaultMaxUpgraded, "most upgraded (WebSocket) and h2c pass-through connections open at once; more get 503 (h2c: GOAWAY)")
	fs.DurationVar(&o.UpgradeIdleTimeout, "upgrade-idle-timeout", proxy.DefaultUpgradeIdle, "close an upgraded (WebSocket) or h2c pass-through connection after this long without a byte either way")
	fs.DurationVar(&o.SendTimeout, "send-timeout", connguard.DefaultSendTimeout, "close a client connection that takes no byte of a response for this long (between two writes, not for the whole response: a slow but steady download is served); at least 1s")
	fs.Float64Var(&o.PurgeRate, "purge-rate", 10, "purges accepted per second, admin POST /purge and serving-port PURGE together (token bucket; 0 = no limit); a purge of everything takes the whole burst")
	fs.IntVar(&o.PurgeBurst, "purge-burst", 50, "purges (both ports) accepted in a burst above --purge-rate")
	fs.StringVar(&o.BodyDir, "body-dir", "", "directory for bodies above the tier's bodyStore.threshold, kept as files and served with sendfile (made 0700 when missing; in a pod the operator's emptyDir); none = bodies above l1.maxEntrySize stream through uncached")
	bodyDirSize := fs.String("body-dir-size", "", "budget of --body-dir, a size such as 2Gi; 0 or empty = 90% of the directory's free space at start")
	fs.BoolVar(&o.AdminPprof, "admin-pprof", false, "serve Go profiles (CPU, heap, goroutines, execution trace) under /debug/pprof/ on the admin port; off by default")
	fs.StringVar(&o.MemoryLimit, "memory-limit", "auto", "Go soft memory limit: a size (768Mi), 0 for none, or auto (l1.maxSize + 48Mi, raised while that leaves the live heap less than 16Mi of room; unless GOMEMLIMIT is set)")
	alogDefaults := accesslog.DefaultDefaults()
	fs.BoolVar(&o.AccessLog.Enabled, "access-log", alogDefaults.Enabled, "write one JSON line per request to stdout (the tier's accessLog.enabled wins when set)")
	fs.IntVar(&o.AccessLog.SamplePercent, "access-log-sample-percent", alogDefaults.SamplePercent, "log this share of requests, 1-100; 5xx answers are always logged (the tier's accessLog.samplePercent wins when set)")
	accessExclude := fs.String("access-log-exclude", "", "comma-separated paths never logged, exact or a prefix ending in * (the tier's accessLog.excludePaths wins when set)")
	fs.BoolVar(&o.ShowVersion, flagVersion, false, "print the version, git revision and Go version, and exit (not read from the environment)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.ShowVersion {
		return o, nil
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		// TIERCACHE_VERSION could be anyone's variable; --version is
		// asked for on the command line only.
		if set[f.Name] || f.Name == flagVersion {
			return
		}
		env := envName(f.Name)
		if v := getenv(env); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", env, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return o, err
	}
	if o.Upstream == "" {
		return o, errors.New("--upstream is required (or TIERCACHE_UPSTREAM)")
	}
	if *accessExclude != "" {
		for _, p := range strings.Split(*accessExclude, ",") {
			o.AccessLog.ExcludePaths = append(o.AccessLog.ExcludePaths, strings.TrimSpace(p))
		}
	}
	if err := o.AccessLog.Validate(); err != nil {
		return o, err
	}
	size, err := parseBodyDirSize(*bodyDirSize)
	if err != nil {
		return o, err
	}
	o.BodyDirSize = size
	if *bodyDirSize != "" && o.BodyDir == "" {
		return o, errors.New("--body-dir-size (or TIERCACHE_BODY_DIR_SIZE) needs --body-dir (or TIERCACHE_BODY_DIR)")
	}
	if o.ShutdownTimeout <= 0 {
		return o, errors.New("--shutdown-timeout: must be > 0")
	}
	if o.DrainDelay < 0 || o.DrainDelay > 5*time.Minute {
		return o, errors.New("--drain-delay: must be between 0 and 5m")
	}
	if o.MaxHeaderBytes < 4096 {
		return o, errors.New("--max-header-bytes: must be >= 4096")
	}
	if o.MaxConns < 0 {
		return o, fmt.Errorf("--max-connections: must be >= 0 (0: no bound; got %d)", o.MaxConns)
	}
	if o.MaxUpgraded < 1 {
		return o, errors.New("--max-upgraded-connections: must be >= 1")
	}
	if o.UpgradeIdleTimeout < time.Second {
		return o, errors.New("--upgrade-idle-timeout: must be >= 1s")
	}
	if o.SendTimeout < time.Second {
		// nginx's send_timeout has no "off" either: a client that never
		// reads must not hold a connection, a goroutine and a body
		// file's descriptor for ever.
		return o, fmt.Errorf("--send-timeout: must be >= 1s (got %s)", o.SendTimeout)
	}
	if o.PurgeRate < 0 {
		return o, errors.New("--purge-rate: must be >= 0")
	}
	if o.PurgeBurst < 1 {
		return o, errors.New("--purge-burst: must be >= 1")
	}
	if o.ConfigFile != "" && o.InitialConfig != "" {
		return o, errors.New("--config and --initial-config (TIERCACHE_INITIAL_CONFIG) are both set: give one")
	}
	if o.ControlPlaneCA != "" && o.ControlPlaneCAPEM != "" {
		return o, errors.New("--control-plane-ca and --control-plane-ca-pem (TIERCACHE_CONTROL_PLANE_CA_PEM) are both set: give one")
	}
	if o.SecretsDir != "" {
		for _, f := range []struct{ flag, value, file string }{
			{"redis-password", o.RedisPassword, fileRedisPassword},
			{"redis-ca-cert", o.RedisCACert, fileRedisCA},
			{"purge-token", o.PurgeToken, filePurgeToken},
		} {
			if f.value != "" {
				errs = append(errs, fmt.Errorf("--%s (or %s) and --secrets-dir are both set: with --secrets-dir the secret comes from its file %s; give one", f.flag, envName(f.flag), f.file))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return o, err
		}
	}
	if o.ControlPlane != "" {
		for _, id := range []struct{ flag, value string }{
			{"tier", o.Tier}, {"pod-namespace", o.PodNamespace}, {"pod-name", o.PodName},
		} {
			switch {
			case id.value == "":
				errs = append(errs, fmt.Errorf("--control-plane needs --%s (or %s)", id.flag, envName(id.flag)))
			case strings.Contains(id.value, "/"):
				errs = append(errs, fmt.Errorf("--%s: must not contain '/' (got %q)", id.flag, id.value))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return o, err
		}
	}
	return o, nil
}

// flagVersion is --version.
const flagVersion = "version"

// envName is the environment variable of a flag: TIERCACHE_<FLAG>.
func envName(flag string) string {
	return "TIERCACHE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Run runs the sidecar until ctx ends, then drains and returns.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runWith(ctx, args, os.Getenv, stdout, stderr, nil)
}

// Addrs are the addresses a running sidecar listens on.
type Addrs struct{ Serve, Admin string }

// RunWith is Run with the environment and a readiness callback injected.
// ready, when not nil, is called with the bound serving and admin
// addresses once both listen (tests use it with ":0" addresses).
// The access log goes to stderr with the other lines (Run sends it to
// stdout).
func RunWith(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, ready func(Addrs)) error {
	return runWith(ctx, args, getenv, stderr, stderr, ready)
}

func runWith(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, ready func(Addrs)) error {
	o, err := ParseArgs(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	build := version.Get()
	if o.ShowVersion {
		_, err := fmt.Fprintln(stdout, "tiercache-sidecar", build)
		return err
	}
	log, err := newLogger(stderr, o.LogLevel, o.LogFormat)
	if err != nil {
		return err
	}
	upstream, err := url.Parse(o.Upstream)
	if err != nil || (upstream.Scheme != "http" && upstream.Scheme != "https") || upstream.Host == "" {
		return fmt.Errorf("--upstream: must be an absolute http(s) URL such as http://127.0.0.1:8081 (got %q)", o.Upstream)
	}
	initial, source, err := startupConfig(o, log)
	if err != nil {
		return err
	}
	if err := checkKeyPrefix(initial.L2, o); err != nil {
		return fmt.Errorf("config from %s: %w", source, err)
	}
	var sec secrets
	if o.SecretsDir != "" {
		if fi, err := os.Stat(o.SecretsDir); err != nil || !fi.IsDir() {
			return fmt.Errorf("--secrets-dir: %s is not a readable directory", o.SecretsDir)
		}
		if sec, err = readSecrets(o.SecretsDir); err != nil {
			return err
		}
	}
	compiled, err := tierconfig.Compile(effective(initial, o, sec))
	if err != nil {
		return fmt.Errorf("config from %s: %w", source, err)
	}
	// The version and the logged hash never cover secret values (an
	// offline oracle for them): a pushed config carries none, and a file
	// config's are left out.
	version := controlplane.Version(redacted(initial))
	log.Info("config loaded", "source", source, "version", version, "hash", redacted(compiled.Config).Hash(),
		"secrets_dir", o.SecretsDir)
	holder := tierconfig.NewHolder(compiled)
	memLimit, err := memoryLimit(o.MemoryLimit, getenv("GOMEMLIMIT"), compiled.Config.L1.MaxSize)
	if err != nil {
		return err
	}
	if memLimit > 0 && o.MemoryLimit != "auto" {
		debug.SetMemoryLimit(memLimit)
		log.Debug("memory limit set", "bytes", memLimit)
	}

	if o.BodyDir != "" {
		given := o.BodyDirSize
		if o.BodyDirSize, err = prepareBodyDir(o.BodyDir, o.BodyDirSize, freeBytes); err != nil {
			return err
		}
		log.Info("body directory ready", "dir", o.BodyDir, "bytes", o.BodyDirSize,
			"size", tierconfig.Size(o.BodyDirSize).String(), "automatic", given == 0)
		// Not an error: the filesystem may be shared and free space come
		// back; the store then meets ENOSPC first, which never fails a
		// request.
		if avail, err := freeBytes(o.BodyDir); err == nil && given > avail {
			log.Warn("--body-dir-size is more than the free space of the body directory's filesystem",
				"dir", o.BodyDir, "size", tierconfig.Size(given).String(), "free", tierconfig.Size(avail).String())
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dp := &dataPlane{
		ctx:        ctx,
		o:          o,
		getenv:     getenv,
		upstream:   upstream,
		log:        log,
		holder:     holder,
		rt:         proxy.NewTransport(),
		id:         instanceID(o),
		stopRetire: make(chan struct{}),
		watches:    invalidate.NewWatches(),
		purgeLimit: invalidate.NewLimiter(o.PurgeRate, o.PurgeBurst),
		keys:       invalidate.NewKeyring(),
		base:       initial,
		sec:        sec,
	}
	dp.keys.Set([]byte(sec.invalidationKey), time.Now())
	if memLimit > 0 && o.MemoryLimit == "auto" {
		// The automatic limit follows the live heap above its floor (see
		// softLimit); the goroutine ends with the run.
		dp.soft = newSoftLimit()
		dp.soft.setFloor(memLimit)
		log.Debug("memory limit set", "bytes", memLimit, "automatic", true)
		softDone := make(chan struct{})
		tick := time.NewTicker(softLimitPoll)
		go func() { defer close(softDone); dp.soft.run(ctx, tick.C, runtimeHeap()) }()
		defer func() { cancel(); <-softDone; tick.Stop() }()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), build.Collector())
	if dp.m, err = metrics.New(reg, dp.l1Stats); err != nil {
		return err
	}
	for _, r := range invalidate.RejectReasons() {
		dp.m.InvalidationsRejected.WithLabelValues(r)
	}
	dp.setVersion(version)
	// The access log outlives the data plane's generations; it is closed
	// (its last lines written) once requests have drained.
	if dp.alog, err = accesslog.New(accesslog.Options{
		Writer: stdout, Defaults: o.AccessLog, Registerer: reg,
		ErrorLog: func(err error) { log.Warn("writing the access log failed; lines are dropped", "err", err) },
	}); err != nil {
		return err
	}
	defer func() { _ = dp.alog.Close(context.WithoutCancel(ctx)) }()
	var recovered []bodystore.Recovered
	if o.BodyDir != "" {
		// Every file is verified (its CRC too) before the sidecar serves,
		// so start-up time grows with what the directory holds.
		if dp.bodies, recovered, err = bodystore.Open(ctx, bodystore.Options{
			Dir: o.BodyDir, MaxBytes: o.BodyDirSize, MaxObject: int64(tierconfig.MaxBodyObjectSize),
			Metrics: dp.m, Logger: log,
		}); err != nil {
			return err
		}
		// Closed after the data plane (deferred calls run in reverse).
		defer dp.bodies.Close()
	}
	dp.up = proxy.NewUpgrades(upstream, holder, dp.rt, dp.m, log, o.MaxUpgraded, o.UpgradeIdleTimeout)
	if upstream.Scheme == "http" {
		d := &net.Dialer{KeepAlive: 30 * time.Second}
		dp.h2c = &passthrough{origin: upstreamHostPort(upstream), idle: o.UpgradeIdleTimeout, up: dp.up, m: dp.m, log: log, dial: d.DialContext}
	}

	if o.ControlPlane != "" {
		// Closed after the data plane (deferred calls run in reverse).
		if dp.relay, err = newRelayClient(o, log); err != nil {
			return fmt.Errorf("--control-plane: %w", err)
		}
		defer dp.relay.Close()
	}
	var warm atomic.Bool
	first, err := dp.build(compiled, nil, &warm)
	if err != nil {
		return err
	}
	dp.cur.Store(first)
	defer dp.close()
	if len(recovered) > 0 {
		dp.reuseBodies(ctx, first, recovered)
	}
	dp.warnUnauthenticated(compiled)

	// The control-plane client starts after the first generation is in
	// place and is stopped before the data plane closes. Nothing waits
	// for it: the sidecar serves, and is ready, with the config it
	// started with.
	var cp *controlplane.Client
	if o.ControlPlane != "" {
		if cp, err = newControlPlaneClient(o, dp, initial, source, reg); err != nil {
			return err
		}
	}

	var sw *secretsWatch
	if o.SecretsDir != "" {
		if sw, err = newSecretsWatch(o.SecretsDir, secretsPoll, dp.setSecrets, log); err != nil {
			return err
		}
	}

	serveLn, err := net.Listen("tcp", o.Listen)
	if err != nil {
		if sw != nil {
			_ = sw.w.Close()
		}
		return fmt.Errorf("--listen: %w", err)
	}
	adminLn, err := net.Listen("tcp", o.AdminListen)
	if err != nil {
		if sw != nil {
			_ = sw.w.Close()
		}
		serveLn.Close()
		return fmt.Errorf("--admin-listen: %w", err)
	}

	serve := &http.Server{
		Handler:           connguard.Middleware(dp),
		ConnContext:       connguard.ConnContext,
		ConnState:         connguard.ConnState,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	drain := newDrainer(o.DrainDelay, o.ShutdownTimeout, o.DrainToken, serve, log)
	defer drain.stop()
	admin := &http.Server{
		Handler:           adminMux(reg, dp.purgeHandler(), dp.configHandler(), drain.hook(ctx), drain.draining, &warm, o.AdminPprof),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 2)
	go func() {
		errc <- serve.Serve(connguard.Listener(serveLn, connguard.SendTimeout(o.SendTimeout), connguard.MaxConns(o.MaxConns, dp.m)))
	}()
	go func() { errc <- admin.Serve(adminLn) }()

	cpCtx, cpCancel := context.WithCancel(ctx)
	defer cpCancel()
	cpDone := make(chan struct{})
	if cp != nil {
		go func() { defer close(cpDone); _ = cp.Run(cpCtx) }()
	} else {
		close(cpDone)
	}
	// Secret rotations, like pushes, stop before the data plane closes.
	secDone := make(chan struct{})
	if sw != nil {
		go func() { defer close(secDone); sw.run(cpCtx) }()
	} else {
		close(secDone)
	}
	log.Info("tiercache sidecar serving",
		"version", build.Version, "revision", build.Revision,
		"listen", serveLn.Addr().String(), "admin", adminLn.Addr().String(),
		"upstream", upstream.String(), "config", version, "source", source,
		"control_plane", o.ControlPlane,
		"tier", o.Tier, "pod", o.PodNamespace+"/"+o.PodName)
	if ready != nil {
		ready(Addrs{Serve: serveLn.Addr().String(), Admin: adminLn.Addr().String()})
	}

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			runErr = err
		}
	}
	// Drain: report not ready, keep serving (closing each connection after
	// its response) while endpoints catch up, then stop accepting and let
	// in-flight requests end. After the preStop hook held the app for the
	// drain delay, none of it is left to wait.
	drainEnd := drain.terminate(time.Now())
	log.Info("shutting down", "drain_delay", o.DrainDelay.String(), "drain_left", max(time.Until(drainEnd), 0).Round(time.Millisecond).String(), "timeout", o.ShutdownTimeout.String())
	if left := time.Until(drainEnd); left > 0 && runErr == nil {
		t := time.NewTimer(left)
		select {
		case <-t.C:
		case err := <-errc:
			t.Stop()
			runErr = err
		}
	}
	// No config changes while draining.
	cpCancel()
	<-cpDone
	<-secDone
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), o.ShutdownTimeout)
	defer scancel()
	if err := serve.Shutdown(sctx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("draining requests: %w", err))
	}
	// Shutdown does not know hijacked connections: close the WebSockets
	// (and other upgraded connections) now that requests have drained.
	if err := dp.up.Close(sctx); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if err := admin.Shutdown(sctx); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if err := dp.close(); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if err := dp.alog.Close(sctx); err != nil {
		runErr = errors.Join(runErr, err)
	}
	return runErr
}

// upstreamHostPort is the origin's TCP address: the upstream's host, with
// port 80 when it names none.
func upstreamHostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

func adminMux(reg *prometheus.Registry, purge, config, drain http.Handler, draining func() bool, warm *atomic.Bool, profiles bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	// Ready means: listening, config loaded, the L1 preload from L2 ended
	// (bounded by its timeout), not draining. It never depends on the
	// origin, Redis being up, or the control plane (a config pushed later
	// that rebuilds L1 or L2 does not make the sidecar unready).
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if draining() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		if !warm.Load() {
			http.Error(w, "warming L1 from L2", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("/purge", purge)
	mux.Handle("/config", config)
	mux.Handle(drainPath, drain)
	if profiles {
		// Not pprof.Cmdline: the command line may carry secrets
		// (--redis-password, --purge-token).
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// memoryLimit returns the soft memory limit to set (0: leave the runtime's);
// for auto, the floor that softLimit keeps it at or above. L1 keeps
// maxSize bytes live; without a limit the default GC pacing lets the heap
// grow to about twice the live heap before collecting, so a sidecar with
// a 64Mi L1 under a flood of distinct URLs peaked at L1 + 110Mi of RSS.
// The automatic limit is L1 plus a fixed allowance for the process and
// in-flight bodies (tierconfig.AutoMemoryLimit), which keeps RSS within
// L1 + 64Mi.
func memoryLimit(flagValue, envGOMEMLIMIT string, l1Max tierconfig.Size) (int64, error) {
	switch flagValue {
	case "auto":
		if envGOMEMLIMIT != "" {
			return 0, nil
		}
		return int64(tierconfig.AutoMemoryLimit(l1Max)), nil
	case "0", "off", "none":
		return 0, nil
	}
	sz, err := tierconfig.ParseSize(flagValue)
	if err != nil {
		return 0, fmt.Errorf("--memory-limit: %w", err)
	}
	if sz < 64<<20 {
		return 0, fmt.Errorf("--memory-limit: %s is below the 64Mi minimum", sz)
	}
	return int64(sz), nil
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not json or text", format)
}
