// Command redisentry is the entrypoint of the real-node e2e's Redis image
// (e2e/pods): Debian's redis-server and redis-cli from the tool cache,
// with their shared libraries and ELF interpreter at the image's root
// (an image built without a shell or a package manager). It runs the real
// binary through the interpreter with the image's root as the library
// path, as the official image's entrypoint would run it:
//
//   - as the image's entrypoint, with the chart's args ("redis-server
//     --save ..."), it starts /redis-server.bin with --protected-mode no
//     added (Debian's build refuses remote clients without a password
//     otherwise; the official image's entrypoint adds it too);
//   - installed as /redis-cli (PATH=/), it runs /redis-cli.bin, for the
//     chart's readiness probe (redis-cli ping).
//
// It is test tooling, not part of the product.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

const (
	interpreter = "/ld.so" // the ELF interpreter the binaries name, whatever the architecture
	libraryPath = "/"
)

func main() {
	args := os.Args[1:]
	var bin string
	switch {
	case filepath.Base(os.Args[0]) == "redis-cli":
		bin = "/redis-cli.bin"
	case len(args) > 0 && args[0] == "redis-server":
		bin = "/redis-server.bin"
		args = append([]string{"--protected-mode", "no"}, args[1:]...)
	default:
		fmt.Fprintf(os.Stderr, "redisentry: want redis-server ARGS... or to run as redis-cli, got %q\n", os.Args)
		os.Exit(2)
	}
	argv := append([]string{interpreter, "--library-path", libraryPath, bin}, args...)
	err := syscall.Exec(interpreter, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "redisentry: exec %s: %v\n", bin, err)
	os.Exit(127)
}
