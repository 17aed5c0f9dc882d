package workflow

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ExportFile is the file, relative to the checkout's root, where a run's
// steps write values for the runs that need it (`needs:`); every step
// finds its path in $KNOTLESS_EXPORT. It holds lines NAME=VALUE (see
// ParseExports); the runner reads it after the last step, and a run that
// needs this one finds the values in NeedsDir/NEED.env, in the same
// format.
const ExportFile = ".knotless/export.env"

// Limits of an export file.
const (
	MaxExportSize = 64 << 10 // bytes
	MaxExports    = 100      // names
)

// ParseExports reads an export file: one NAME=VALUE per line, NAME a
// variable name (ValidEnvName), VALUE the rest of the line, byte for byte
// (UTF-8 without control characters but tab; no quoting, no escapes); a
// trailing CR is dropped; blank lines and lines starting with #
// are skipped, and a name given twice keeps its last value. It returns
// the values and a message per line it could not take (with its
// number), or one message when the file is larger than MaxExportSize or
// has more than MaxExports names.
func ParseExports(b []byte) (map[string]string, []string) {
	if len(b) > MaxExportSize {
		return nil, []string{fmt.Sprintf("%s is %d bytes; at most %d: nothing exported (put larger data in outputs:)", ExportFile, len(b), MaxExportSize)}
	}
	out := map[string]string{}
	var problems []string
	for i, line := range bytes.Split(b, []byte("\n")) {
		s := strings.TrimSuffix(string(line), "\r")
		if strings.TrimSpace(s) == "" || strings.HasPrefix(strings.TrimSpace(s), "#") {
			continue
		}
		name, value, ok := strings.Cut(s, "=")
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s:%d: no = in the line; write NAME=VALUE", ExportFile, i+1))
		case !ValidEnvName(name):
			problems = append(problems, fmt.Sprintf("%s:%d: %q is not a valid name; use letters, digits and _, not starting with a digit", ExportFile, i+1, name))
		case !ValidExportValue(value):
			problems = append(problems, fmt.Sprintf("%s:%d: the value of %s is not one line of UTF-8 text (a control character?)", ExportFile, i+1, name))
		default:
			out[name] = value
		}
	}
	if len(out) > MaxExports {
		return nil, []string{fmt.Sprintf("%s has %d names; at most %d: nothing exported", ExportFile, len(out), MaxExports)}
	}
	return out, problems
}

// FormatExports writes values as an export file, names sorted: what a
// run that needs another one finds in NeedsDir/NEED.env.
func FormatExports(values map[string]string) []byte {
	var b bytes.Buffer
	for _, k := range slices.Sorted(maps.Keys(values)) {
		b.WriteString(k + "=" + values[k] + "\n")
	}
	return b.Bytes()
}

// ValidExportValue reports whether v can be an exported value: UTF-8
// text without control characters but tab (it is shown on terminals and
// written back as one line).
func ValidExportValue(v string) bool {
	return utf8.ValidString(v) && strings.IndexFunc(v, func(r rune) bool { return r != '\t' && unicode.IsControl(r) }) < 0
}
