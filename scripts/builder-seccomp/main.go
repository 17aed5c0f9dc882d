// Command builder-seccomp writes the builder's Localhost seccomp profile,
// deploy/kubernetes/builds/builder-seccomp.json, from containerd's own
// RuntimeDefault (github.com/containerd/containerd/v2/contrib/seccomp,
// the version the local cluster runs) plus the builder's additions
// (profile.go), so that the file is made, not kept by hand. It is a
// module of its own so that containerd's dependencies stay out of
// Knotless's go.mod. Run from the repository root:
//
//	make builder-seccomp                                 # write the profile
//	go run -C scripts/builder-seccomp . -check          # exit 1 when the committed profile is not what this writes
//
// It runs on amd64 only (containerd's profile depends on the architecture
// it runs on; profile.go says how the arm64 part is made).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "builder-seccomp:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("builder-seccomp", flag.ContinueOnError)
	out := fs.String("o", ProfilePath, "the profile file to write (or to check)")
	check := fs.Bool("check", false, "write nothing; exit 1 when the file is not what this would write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	want, err := ProfileJSON()
	if err != nil {
		return err
	}
	if *check {
		got, err := os.ReadFile(*out)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s is not what this program writes from containerd %s's RuntimeDefault and the builder's additions (edited by hand? the additions live in scripts/builder-seccomp/profile.go): run `make builder-seccomp` and commit it", *out, ContainerdVersion())
		}
		return nil
	}
	return os.WriteFile(*out, want, 0o644)
}
