package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/envflag"
)

func TestGitLimits_FlagsEnvironmentAndDefaultsInHelp(t *testing.T) {
	t.Setenv("KNOTLESS_MAX_PUSH_SIZE", "64MiB")
	t.Setenv("KNOTLESS_REPO_QUOTA", "2Gi")
	cmd := newCommand()
	if err := cmd.ParseFlags([]string{"--max-fetch-request", "512KiB"}); err != nil {
		t.Fatal(err)
	}
	if err := envflag.Apply(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"max-push-size": "64Mi", "repo-quota": "2Gi", "max-fetch-request": "512Ki"} {
		if v := cmd.Flags().Lookup(name).Value.String(); v != want {
			t.Errorf("--%s = %s, want %s", name, v, want)
		}
	}
	var stdout, stderr strings.Builder
	if code := execute(context.Background(), []string{"--help"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for _, re := range []string{
		`--max-push-size size .*\[env KNOTLESS_MAX_PUSH_SIZE\] \(default 1Gi\)`,
		`--max-fetch-request size .*\[env KNOTLESS_MAX_FETCH_REQUEST\] \(default 10Mi\)`,
		`--repo-quota size .*0: no quota.*\[env KNOTLESS_REPO_QUOTA\]`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout.String()) {
			t.Errorf("--help does not match %s:\n%s", re, stdout.String())
		}
	}
}
