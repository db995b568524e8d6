package l1

import "time"

// defaultSizes is what the sidecar gives L1 when a tier sets no sizes
// (tierconfig's defaults: 256 MiB in 256 shards, entries up to 1 MiB) with
// the 24h LifeWindow it always passes: the configuration these tests
// measure.
func defaultSizes() Config {
	return Config{MaxSize: 256 * mib, MaxEntrySize: 1 * mib, Shards: 256, LifeWindow: 24 * time.Hour}
}
