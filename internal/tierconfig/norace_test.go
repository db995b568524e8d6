//go:build !race

package tierconfig

const raceEnabled = false
