// Package version holds the build's version, set at link time with
// -X knotless.dev/knotless/internal/version.Version=... by the Makefile.
package version

import "runtime/debug"

// Version is the release or `git describe` of this build. A build that
// was not stamped says "dev", followed by the commit Go recorded in it
// when it was built in a git checkout ("dev+1a2b3c4d5e6f", "+dirty" when
// the tree had changes); a build without either (-buildvcs=false, as the
// deployment's reproducible build) is identified by its executable's
// SHA-256 instead, which knotless-run reports beside this.
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
