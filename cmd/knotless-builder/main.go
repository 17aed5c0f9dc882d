// Command knotless-builder is the entrypoint of the builder image: the
// BuildKit sidecar of a kube job pod whose workflow says
// container-builds: true (internal/builder, docs/container-builds.md).
//
//	knotless-builder [--share /run/buildkit] [--open-socket] -- buildkitd [FLAG...]
//
// Runners start it, people do not.
package main

import (
	"flag"
	"fmt"
	"os"

	"knotless.dev/knotless/internal/builder"
)

func main() {
	fs := flag.NewFlagSet("knotless-builder", flag.ExitOnError)
	var c builder.Config
	fs.StringVar(&c.Share, "share", "/run/buildkit", "directory shared with the job's container: bin/buildctl and buildkitd.sock")
	fs.BoolVar(&c.OpenSocket, "open-socket", false, "make the socket 0666 (a job whose user is the image's own)")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: knotless-builder [--share DIR] [--open-socket] -- buildkitd [FLAG...]")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	c.Daemon, c.Stderr = fs.Args(), os.Stderr
	if len(c.Daemon) == 0 {
		fs.Usage()
		os.Exit(2)
	}
	code, err := builder.Run(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "knotless-builder:", err)
		os.Exit(1)
	}
	os.Exit(code)
}
