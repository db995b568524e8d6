//go:build race

package tierconfig

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// code that relies on a pool (regexp's matchers) allocates now and then.
const raceEnabled = true
