package testredis

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel SIGKILL the child when the test binary
// dies, even when it dies without running its cleanups. (Pdeathsig follows
// the OS thread that started the child; Go ends a thread only when a
// goroutine that locked it exits, which nothing here does.)
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
