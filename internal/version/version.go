// Package version holds the build's version, set at link time with
// -X knotless.dev/knotless/internal/version.Version=... by the Makefile
// and the release build (the file VERSION).
package version

import "runtime/debug"

// Version is the version this build was stamped with (VERSION, e.g.
// "0.20.0-dev"). A build that was not stamped (a plain go build) says
// "dev", followed by the commit Go recorded in it when it was built in a
// git checkout ("dev+1a2b3c4d5e6f", "+dirty" when the tree had changes).
// Builds of one version differ: knotless-run reports its executable's
// SHA-256 beside this, which tells them apart (and matches a manifest's
// digest).
var Version = "dev"

func init() {
	if Version != "dev" {
		return
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value[:min(len(s.Value), 12)]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	if rev != "" {
		Version = "dev+" + rev + dirty
	}
}
