//go:build race

package proxy

// raceEnabled: the race detector slows every byte copied through Go code
// several times; tests that move very large bodies move less under it.
const raceEnabled = true
