package runnercli

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/workflow"
)

// envFlag records that flag name falls back to environment variable env.
func envFlag(fs *pflag.FlagSet, name, env string) {
	_ = fs.SetAnnotation(name, "env", []string{env})
}

func envNote(env string) string { return " [env " + env + "]" }

// applyEnv sets every flag the command line left alone from its
// environment variable, when that is set.
func applyEnv(cmd *cobra.Command) error {
	var err error
	visit := func(f *pflag.Flag) {
		envs := f.Annotations["env"]
		if err != nil || f.Changed || len(envs) == 0 {
			return
		}
		if v, ok := os.LookupEnv(envs[0]); ok && v != "" {
			if e := f.Value.Set(v); e != nil {
				err = usagef("%s=%q: %v", envs[0], v, e)
			}
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	return err
}

// sizeValue is a byte size flag ("64Mi", "1000000").
type sizeValue int64

func (s *sizeValue) String() string { return strconv.FormatInt(int64(*s), 10) }
func (s *sizeValue) Type() string   { return "bytes" }
func (s *sizeValue) Set(v string) error {
	n, err := workflow.ParseSize(v)
	if err != nil {
		return err
	}
	*s = sizeValue(n)
	return nil
}

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
