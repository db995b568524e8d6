//go:build !linux

package testredis

import "os/exec"

// setDeathSignal: only Linux has Pdeathsig; elsewhere the t.Cleanup kill
// is all there is.
func setDeathSignal(*exec.Cmd) {}
