package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// VersionFile, at the module root, holds the one version string of a build
// (e.g. "0.20.0-dev"): make build, make release and Build stamp it into
// every program (VersionVar), and the release's manifest is named after it.
const VersionFile = "VERSION"

// VersionVar is the variable the linker sets to the version (-X).
const VersionVar = "knotless.dev/knotless/internal/version.Version"

// versionPattern is what a version may hold: it goes into a file name, a
// linker flag and a Kubernetes label value (app.kubernetes.io/version),
// whose rule this is.
var versionPattern = regexp.MustCompile(`^[0-9A-Za-z]([0-9A-Za-z._-]{0,61}[0-9A-Za-z])?$`)

// ReadVersion returns the version written in moduleRoot/VERSION, white
// space around it trimmed. Errors: a missing file, or a version that is
// not a Kubernetes label value (1 to 63 letters, digits, '.', '_' and '-',
// beginning and ending with a letter or digit; so no '+'); the error names
// the file and what to write.
func ReadVersion(moduleRoot string) (string, error) {
	path := filepath.Join(moduleRoot, VersionFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the version: %w (write one line such as 0.20.0-dev into %s)", err, VersionFile)
	}
	v := strings.TrimSpace(string(data))
	if !versionPattern.MatchString(v) {
		return "", fmt.Errorf("%s: version %q: want 1 to 63 letters, digits, '.', '_' or '-', beginning and ending with a letter or digit (a Kubernetes label value), such as 0.20.0-dev", path, v)
	}
	return v, nil
}

// LDFlags are the linker flags of every program of a release: no symbol
// table or DWARF (-s -w), and the version.
func LDFlags(version string) string {
	return "-s -w -X " + VersionVar + "=" + version
}
