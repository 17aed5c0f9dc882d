// Command knotless-builder is the entrypoint of the builder image: the
// BuildKit sidecar of a kube job pod whose workflow says
// container-builds: true (internal/builder, docs/container-builds.md).
//
//	knotless-builder [--share /run/buildkit] [--open-socket] [--host-ids FIRST [--own DIR]...] -- buildkitd [FLAG...]
//
// The kube executor starts it in a pod's user namespace; the docker
// executor on an engine whose containers' root is the host's, with
// --host-ids (the build's root is then host uid FIRST).
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
	fs.IntVar(&c.HostIDs, "host-ids", 0, "map the daemon's uids and gids 0-65535 to FIRST.. of the container's (whose root is the host's), and drop to FIRST once it runs (0: map the container's ids to themselves)")
	fs.Func("own", "a directory the daemon writes to, given to group --host-ids (repeatable)", func(s string) error {
		c.Own = append(c.Own, s)
		return nil
	})
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: knotless-builder [--share DIR] [--open-socket] [--host-ids FIRST [--own DIR]...] -- buildkitd [FLAG...]")
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
