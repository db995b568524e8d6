package inject

// The names below are the contract between the webhook, the controller, the
// sidecar and the end-to-end tests. Other packages use these constants
// instead of repeating the strings.
const (
	// AnnotationTier requests injection; its value is the name of a
	// CacheTier in the pod's namespace.
	AnnotationTier = "tiercache.io/tier"
	// AnnotationPort picks the application port to front, by name or
	// number. Without it the TCP port named PreferredPortName is fronted;
	// a pod with neither is refused (no port is guessed).
	AnnotationPort = "tiercache.io/port"
	// AnnotationConfigHash records the hash of the config rendered into the
	// pod at admission.
	AnnotationConfigHash = "tiercache.io/config-hash"
	// AnnotationUpstreamPort records the application port number the
	// sidecar forwards misses to.
	AnnotationUpstreamPort = "tiercache.io/upstream-port"
	// AnnotationInjected is "true" on injected pods.
	AnnotationInjected = "tiercache.io/injected"

	// LabelTier carries the tier name on injected pods; the controller
	// counts injected pods with this label selector.
	LabelTier = "tiercache.io/tier"
)

const (
	// ContainerName is the name of the sidecar init container. Its
	// presence marks a pod as already injected.
	ContainerName = "tiercache"
	// VolumeName is the emptyDir holding the sidecar's state (the last
	// good config), mounted at StateDir.
	VolumeName = "tiercache-state"
	// StateDir is where VolumeName is mounted in the sidecar and the value
	// of its --state-dir flag.
	StateDir = "/var/run/tiercache"

	// BodiesVolumeName is the emptyDir of the body store, added when the
	// tier sets spec.bodyStore.size and mounted at BodyDir.
	BodiesVolumeName = "tiercache-bodies"
	// BodyDir is where BodiesVolumeName is mounted in the sidecar and the
	// value of its --body-dir flag.
	BodyDir = "/var/cache/tiercache/bodies"

	// XDSTokenVolume is the projected ServiceAccount token the sidecar
	// authenticates to the control plane with, mounted read-only at
	// XDSTokenDir; the file is XDSTokenFile (--control-plane-token-file).
	// The kubelet refreshes it before XDSTokenExpirationSeconds pass.
	XDSTokenVolume            = "tiercache-xds-token"
	XDSTokenDir               = "/var/run/secrets/tiercache-xds"
	XDSTokenFile              = "token"
	XDSTokenExpirationSeconds = 600

	// PreferredPortName is the port name fronted when AnnotationPort is
	// absent.
	PreferredPortName = "http"
	// DefaultPortName names the sidecar's serving port when the fronted
	// port had no name to take over.
	DefaultPortName = "tiercache"
	// AdminPortName names the sidecar's admin port (metrics, probes,
	// purge).
	AdminPortName = "tc-admin"

	// DefaultPort is the sidecar's serving port when the tier sets none.
	DefaultPort int32 = 15180
	// DefaultAdminPort is the sidecar's admin port when the tier sets
	// none.
	DefaultAdminPort int32 = 15190
)

// Environment variables of the sidecar container. No secret of the tier is
// ever in one: Secrets reach the sidecar as files in SecretsDir. The drain
// token is the exception: it guards only this pod's drain, and it is in
// the pod spec anyway (the app container's preStop hook sends it).
const (
	EnvPodName       = "TIERCACHE_POD_NAME"
	EnvPodNamespace  = "TIERCACHE_POD_NAMESPACE"
	EnvInitialConfig = "TIERCACHE_INITIAL_CONFIG"
	// EnvControlPlaneCAPEM carries the PEM CA of the control plane's
	// certificate (public): the sidecar connects with TLS when it is set.
	EnvControlPlaneCAPEM = "TIERCACHE_CONTROL_PLANE_CA_PEM"
	// EnvDrainToken is the pod's drain token (Params.DrainToken): the
	// bearer token the sidecar's DrainPath requires.
	EnvDrainToken = "TIERCACHE_DRAIN_TOKEN"
	// EnvGOMAXPROCS is Go's own variable, set from the sidecar's CPU
	// limit when it has one (see maxProcsEnv).
	EnvGOMAXPROCS = "GOMAXPROCS"
)

// Secrets of a tier reach the sidecar as one projected volume that the
// kubelet keeps current; the sidecar reads the files at start and watches
// them (--secrets-dir). A missing file means that secret is unset.
const (
	// SecretsVolumeName is the projected volume, mounted read-only at
	// SecretsDir.
	SecretsVolumeName = "tiercache-secrets"
	// SecretsDir is where SecretsVolumeName is mounted and the value of
	// the sidecar's --secrets-dir flag.
	SecretsDir = "/var/run/secrets/tiercache"

	// Files in SecretsDir.
	FileRedisPassword   = "redis-password"
	FileRedisCACert     = "redis-ca.crt"
	FilePurgeToken      = "purge-token"
	FileInvalidationKey = "invalidation-key"
)

// Secret labels and the per-tier Secret the operator generates.
const (
	// LabelAllowReference, set to "true", lets CacheTiers of the Secret's
	// namespace reference a Secret. The operator watches, reads and mounts
	// only Secrets that carry it.
	LabelAllowReference = "tiercache.io/allow-reference"
	// LabelGeneratedFor names the CacheTier a generated Secret belongs to.
	// The operator never touches a Secret named like a generated one
	// without it.
	LabelGeneratedFor = "tiercache.io/generated-for"
	// GeneratedSecretSuffix makes the generated Secret's name:
	// "<tier>" + GeneratedSecretSuffix.
	GeneratedSecretSuffix = "-tiercache"
	// Keys of the generated Secret (32 random bytes, hex).
	KeyPurgeToken      = "purge-token"
	KeyInvalidationKey = "invalidation-key"
)

// GeneratedSecretName is the name of the Secret the operator generates for
// a tier: "<tier>-tiercache".
func GeneratedSecretName(tier string) string { return tier + GeneratedSecretSuffix }
