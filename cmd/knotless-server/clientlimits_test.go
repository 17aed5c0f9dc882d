package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/envflag"
)

func TestClientLimits_FlagsTakeTheEnvironmentAndHelpShowsDefaults(t *testing.T) {
	t.Setenv("KNOTLESS_MAX_CLAIMS_PER_RUNNER", "5")
	cmd := newCommand()
	if err := envflag.Apply(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	if v := cmd.Flags().Lookup("max-claims-per-runner").Value.String(); v != "5" {
		t.Errorf("max-claims-per-runner = %s, want KNOTLESS_MAX_CLAIMS_PER_RUNNER's 5", v)
	}
	var stdout, stderr strings.Builder
	if code := execute(context.Background(), []string{"--help"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for flag, def := range map[string]string{"max-runner-labels": "32", "max-pending-runners": "100", "max-list-page": "1000",
		"max-claims-per-runner": "2", "replay-cache-size": "500000", "replay-per-runner": "20000",
		"replay-registrations": "10000", "max-step-index": "10000"} {
		env := envflag.Name(flag)
		if !regexp.MustCompile(`--` + flag + ` int .*\[env ` + env + `\] \(default ` + def + `\)`).MatchString(stdout.String()) {
			t.Errorf("--help does not show --%s with %s and default %s", flag, env, def)
		}
	}
}
