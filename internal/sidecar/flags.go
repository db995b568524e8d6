package sidecar

import (
	"strings"

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
