package runnercli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/workflow"
)

func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected arguments: %s", strings.Join(args, " "))
	}
	return nil
}

// envValue is a repeatable NAME=VALUE flag.
type envValue struct{ m map[string]string }

func (e *envValue) String() string { return "" }
func (e *envValue) Type() string   { return "NAME=VALUE" }
func (e *envValue) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	if !ok || name == "" || strings.ContainsAny(name, " \t\x00") {
		return fmt.Errorf("want NAME=VALUE, got %q", s)
	}
	if e.m == nil {
		e.m = map[string]string{}
	}
	e.m[name] = value
	return nil
}

// envPassValue is the repeatable --env-pass NAME flag: names of the
// runner's own environment variables (HTTPS_PROXY, NO_PROXY, ...) whose
// values every step gets. Its environment form (KNOTLESS_ENV_PASS) takes
// names separated by commas.
type envPassValue struct{ names []string }

func (e *envPassValue) String() string { return strings.Join(e.names, ",") }
func (e *envPassValue) Type() string   { return "NAME" }
func (e *envPassValue) Set(s string) error {
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if !workflow.ValidEnvName(name) {
			return fmt.Errorf("want a variable NAME (letters, digits and _, not starting with a digit), got %q", name)
		}
		e.names = append(e.names, name)
	}
	return nil
}

// stepEnv merges the runner's variables for every step: the values of the
// --env-pass names in this process's environment, then --env NAME=VALUE,
// which wins for a name given both ways. A passed name that is not set
// is left out; missing lists such names for a warning.
func stepEnv(pass *envPassValue, set *envValue) (env map[string]string, missing []string) {
	env = map[string]string{}
	for _, name := range pass.names {
		if v, ok := os.LookupEnv(name); ok {
			env[name] = v
		} else {
			missing = append(missing, name)
		}
	}
	for k, v := range set.m {
		env[k] = v
	}
	return env, missing
}

const envPassUsage = "NAME of a variable of the runner's own environment whose value every step gets (repeatable, or comma-separated; e.g. HTTPS_PROXY,NO_PROXY); --env wins for the same name"
