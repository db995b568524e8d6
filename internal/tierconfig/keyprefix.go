package tierconfig

import "fmt"

// KeyPrefix is the Redis key prefix of a tier: tc:<namespace>/<tier>:
// (DESIGN.md, "Redis (L2)"). It is always derived, never chosen, so that a
// tier's config cannot name another tier's keys or channel.
func KeyPrefix(namespace, tier string) string {
	return "tc:" + namespace + "/" + tier + ":"
}

// CheckKeyPrefix refuses an l2.keyPrefix that is set and is not want, the
// prefix of the sidecar's own namespace and tier. It is not part of
// Validate: only the sidecar knows its identity.
func (l L2) CheckKeyPrefix(want string) error {
	if l.KeyPrefix == "" || l.KeyPrefix == want {
		return nil
	}
	return fmt.Errorf("l2.keyPrefix: %q is not this sidecar's prefix %q (derived from its namespace and tier); remove the field", l.KeyPrefix, want)
}
