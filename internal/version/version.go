// Package version holds the build's version, set at link time with
// -X knotless.dev/knotless/internal/version.Version=... by the Makefile.
package version

// Version is the release or `git describe` of this build; "dev" otherwise.
var Version = "dev"
