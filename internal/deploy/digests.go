package deploy

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

// Manifest is the file, relative to the module root, whose init container
// holds the digests: one env entry per file of ManifestFiles, named by
// DigestEnv.
const Manifest = "deploy/kubernetes/base/deployment.yaml"

// DigestEnv names the init container's variable holding the SHA-256 of
// program built for arch: ("knotless-run", "arm64") →
// KNOTLESS_RUN_SHA256_ARM64.
func DigestEnv(program, arch string) string {
	return strings.ToUpper(strings.ReplaceAll(program, "-", "_")) + "_SHA256_" + strings.ToUpper(arch)
}

// ManifestFiles are the files whose digests the manifest holds, by file
// name (FileName), each with its variable (DigestEnv): Programs for every
// one of Arches.
func ManifestFiles() map[string]string {
	files := map[string]string{}
	for _, p := range Programs {
		for _, a := range Arches {
			files[FileName(p, a)] = DigestEnv(p, a)
		}
	}
	return files
}

// digestLine matches "- name: ENV" followed on the next line by
// `value: "HEX"` (the quotes optional), capturing the name and the value.
var digestLine = regexp.MustCompile(`(?m)^(\s*- name: )([A-Z0-9_]+_SHA256_[A-Z0-9]+)(\s*\n\s*value: )"?([0-9a-f]*)"?[ \t]*$`)

// ReadDigests returns the digests written in the manifest text, by
// variable name (DigestEnv).
func ReadDigests(manifest []byte) map[string]string {
	out := map[string]string{}
	for _, m := range digestLine.FindAllSubmatch(manifest, -1) {
		out[string(m[2])] = string(m[4])
	}
	return out
}

// SetDigests returns the manifest text with each file's digest (by file
// name, e.g. "knotless-run-linux-amd64"; a file of ManifestFiles) written
// into its variable, the rest of the text as it was. Errors: a file the
// manifest holds no digest of, or a variable missing from the manifest.
func SetDigests(manifest []byte, digests map[string]string) ([]byte, error) {
	files := ManifestFiles()
	have := ReadDigests(manifest)
	byEnv := map[string]string{}
	var missing []string
	for name, d := range digests {
		env, ok := files[name]
		if !ok {
			return nil, fmt.Errorf("%s: the manifest holds no digest of this file (it holds those of %s)", name, strings.Join(sortedKeys(files), ", "))
		}
		if _, ok := have[env]; !ok {
			missing = append(missing, env)
		}
		byEnv[env] = d
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("the manifest has no env entry %s (want `- name: %s` with `value: \"...\"` on the next line)", strings.Join(missing, ", "), missing[0])
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

// Stale compares the manifest's digests with digests (by file name) and
// describes every difference, one per line; empty when they match. Files
// digests does not name are not compared.
func Stale(manifest []byte, digests map[string]string) string {
	have := ReadDigests(manifest)
	files := ManifestFiles()
	var lines []string
	for _, name := range sortedKeys(files) {
		want, ok := digests[name]
		if !ok {
			continue
		}
		if got := have[files[name]]; got != want {
			lines = append(lines, fmt.Sprintf("%s: the manifest says %s=%q, the build gives %s", name, files[name], got, want))
		}
	}
	return strings.Join(lines, "\n")
}

// WriteDigests writes digests (by file name) into the manifest file at
// path, keeping its mode; changed tells whether its content changed.
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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
