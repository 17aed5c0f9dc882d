package deploy

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

// Manifest is the file, relative to the module root, whose init container
// holds the digests: one env entry per program, named by DigestEnv.
const Manifest = "deploy/kubernetes/base/deployment.yaml"

// DigestEnv names the init container's variable holding program's
// SHA-256: knotless-run → KNOTLESS_RUN_SHA256.
func DigestEnv(program string) string {
	return strings.ToUpper(strings.ReplaceAll(program, "-", "_")) + "_SHA256"
}

// digestLine matches "- name: ENV" followed on the next line by
// `value: "HEX"` (the quotes optional), capturing the name and the value.
var digestLine = regexp.MustCompile(`(?m)^(\s*- name: )([A-Z_]+_SHA256)(\s*\n\s*value: )"?([0-9a-f]*)"?[ \t]*$`)

// ReadDigests returns the digests written in the manifest text, by
// variable name (DigestEnv).
func ReadDigests(manifest []byte) map[string]string {
	out := map[string]string{}
	for _, m := range digestLine.FindAllSubmatch(manifest, -1) {
		out[string(m[2])] = string(m[4])
	}
	return out
}

// SetDigests returns the manifest text with each program's digest
// (by program name, e.g. "knotless-run") written into its variable.
// Errors: a program with no such variable in the manifest.
func SetDigests(manifest []byte, digests map[string]string) ([]byte, error) {
	have := ReadDigests(manifest)
	var missing []string
	for p := range digests {
		if _, ok := have[DigestEnv(p)]; !ok {
			missing = append(missing, DigestEnv(p))
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("the manifest has no env entry %s (want `- name: %s` with `value: \"...\"` on the next line)", strings.Join(missing, ", "), missing[0])
	}
	byEnv := map[string]string{}
	for p, d := range digests {
		byEnv[DigestEnv(p)] = d
	}
	return digestLine.ReplaceAllFunc(manifest, func(b []byte) []byte {
		m := digestLine.FindSubmatch(b)
		d, ok := byEnv[string(m[2])]
		if !ok {
			return b
		}
		return []byte(string(m[1]) + string(m[2]) + string(m[3]) + `"` + d + `"`)
	}), nil
}

// Stale compares the manifest's digests with digests (by program name)
// and describes every difference, one per line; empty when they match.
func Stale(manifest []byte, digests map[string]string) string {
	have := ReadDigests(manifest)
	var lines []string
	for _, p := range Programs {
		want, ok := digests[p]
		if !ok {
			continue
		}
		if got := have[DigestEnv(p)]; got != want {
			lines = append(lines, fmt.Sprintf("%s: the manifest says %s=%q, the build gives %s", p, DigestEnv(p), got, want))
		}
	}
	return strings.Join(lines, "\n")
}

// WriteDigests writes digests into the manifest file at path, keeping its
// mode; changed tells whether its content changed.
func WriteDigests(path string, digests map[string]string) (changed bool, err error) {
	old, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	updated, err := SetDigests(old, digests)
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	if string(updated) == string(old) {
		return false, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return true, os.WriteFile(path, updated, fi.Mode().Perm())
}
