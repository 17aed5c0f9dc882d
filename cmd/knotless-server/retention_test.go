package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/envflag"
)

// The retention flags read KNOTLESS_* like their neighbours, say their
// units and defaults in --help (nothing expires by default), and a
// negative rule is a usage error naming the flag.
func TestRetention_FlagsEnvironmentDefaultsAndBadValues(t *testing.T) {
	t.Setenv("KNOTLESS_KEEP_LOGS_DAYS", "30")
	cmd := newCommand()
	if err := cmd.ParseFlags([]string{"--keep-pipelines", "5"}); err != nil {
		t.Fatal(err)
	}
	if err := envflag.Apply(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"keep-logs-days": "30", "keep-pipelines": "5", "retention-grace": "1h0m0s", "retention-every": "1m0s"} {
		if v := cmd.Flags().Lookup(name).Value.String(); v != want {
			t.Errorf("--%s = %s, want %s", name, v, want)
		}
	}
	var stdout, stderr strings.Builder
	if code := execute(context.Background(), []string{"--help"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for _, re := range []string{
		`--keep-logs-days int .*days after it ended.*0 keeps them forever.*\[env KNOTLESS_KEEP_LOGS_DAYS\]`,
		`--keep-pipelines int .*newest pipelines of each branch.*\[env KNOTLESS_KEEP_PIPELINES\]`,
		`--retention-grace duration .*\[env KNOTLESS_RETENTION_GRACE\] \(default 1h0m0s\)`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout.String()) {
			t.Errorf("--help does not match %s:\n%s", re, stdout.String())
		}
	}
	for _, args := range [][]string{{"--keep-logs-days", "-1"}, {"--keep-pipelines", "-3"}, {"--retention-grace", "0s"}} {
		stdout.Reset()
		stderr.Reset()
		code := execute(context.Background(), append(args, "--data", t.TempDir()), &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), args[0]) {
			t.Errorf("%v: exit %d, stderr %q; want a usage error naming %s", args, code, stderr.String(), args[0])
		}
	}
}
