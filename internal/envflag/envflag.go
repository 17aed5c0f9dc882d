// Package envflag is the one way Knotless's programs (knotless-server,
// knotless-run) give a command-line flag an environment-variable fallback
// and read sizes: a flag bound with Bind takes KNOTLESS_<NAME> (the flag's
// name in upper case, '-' as '_') when the command line leaves it alone,
// and its help says so ("[env KNOTLESS_NAME]"). Size is the one size flag:
// Kubernetes quantities, as workflows write them (10Mi is 10,485,760
// bytes, 10M is 10,000,000).
//
// It must never read a variable for a flag that was not bound, nor let a
// variable override what the command line says.
package envflag

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/units"
)

// annotation is the pflag annotation that holds a flag's variable.
const annotation = "knotless-env"

// Name is the environment variable of flag: KNOTLESS_ and its name in
// upper case, '-' as '_' ("max-push-size" → KNOTLESS_MAX_PUSH_SIZE).
func Name(flag string) string {
	return "KNOTLESS_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Bind gives each named flag of fs its variable Name(flag) and adds
// " [env NAME]" to its help. It panics on a name fs does not have (a
// programming error).
func Bind(fs *pflag.FlagSet, flags ...string) {
	for _, name := range flags {
		BindAs(fs, name, Name(name))
	}
}

// BindAs is Bind with the variable env (for a flag whose variable is not
// Name(flag)).
func BindAs(fs *pflag.FlagSet, flag, env string) {
	f := fs.Lookup(flag)
	if f == nil {
		panic(fmt.Sprintf("envflag: no flag --%s", flag))
	}
	_ = fs.SetAnnotation(flag, annotation, []string{env})
	f.Usage += " [env " + env + "]"
}

// Apply sets every bound flag of the flag sets that the command line left
// alone from its variable, when that is set and not empty. Errors name the
// variable and its value's problem.
func Apply(sets ...*pflag.FlagSet) error {
	var err error
	for _, fs := range sets {
		fs.VisitAll(func(f *pflag.Flag) {
			envs := f.Annotations[annotation]
			if err != nil || f.Changed || len(envs) == 0 {
				return
			}
			if v, ok := os.LookupEnv(envs[0]); ok && v != "" {
				if e := f.Value.Set(v); e != nil {
					err = fmt.Errorf("%s=%q: %w", envs[0], v, e)
				}
			}
		})
	}
	return err
}

// Size is a flag holding a number of bytes, in Kubernetes quantity syntax
// (units.ParseSize: 1048576, 512Ki, 10Mi, 1Gi; k, M, G, T are powers
// of 1000; 10MiB is read as 10Mi), written back with units.FormatSize. P must not be nil.
// Zero is allowed (a limit's "none") only when AllowZero is set.
type Size struct {
	P         *int64
	AllowZero bool
}

// String is the size as FormatSize writes it.
func (s Size) String() string {
	if s.P == nil {
		return "0"
	}
	return units.FormatSize(*s.P)
}

// Set reads v.
func (s Size) Set(v string) error {
	v = strings.TrimSpace(v)
	if s.AllowZero && v == "0" {
		*s.P = 0
		return nil
	}
	// The IEC spellings (10MiB) are the same binary units (10Mi).
	for _, iec := range []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"} {
		if strings.HasSuffix(v, iec) {
			v = strings.TrimSuffix(v, "B")
			break
		}
	}
	n, err := units.ParseSize(v)
	if err != nil {
		return fmt.Errorf("%v (sizes are written like 1048576, 512Ki, 10Mi or 1Gi)", err)
	}
	*s.P = n
	return nil
}

// Type is "size".
func (Size) Type() string { return "size" }
