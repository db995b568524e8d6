// Command pause is the sandbox ("pause") container of test/testnode's
// Kubernetes node: containerd's default sandbox image would be pulled from a
// registry, which the node cannot reach. It holds the pod's namespaces by
// living until SIGTERM or SIGINT, and reaps the children that a shared PID
// namespace hands to it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return
		}
		reap()
	}
}

// reap waits for every child that has exited; one SIGCHLD can stand for
// several.
func reap() {
	for range 1 << 16 {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
