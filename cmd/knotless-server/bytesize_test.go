package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
)

func TestGitLimits_FlagsEnvironmentAndDefaultsInHelp(t *testing.T) {
	t.Setenv("KNOTLESS_MAX_PUSH_SIZE", "64MiB")
	t.Setenv("KNOTLESS_REPO_QUOTA", "2G")
	cmd := newCommand()
	if err := cmd.ParseFlags([]string{"--max-fetch-request", "512KiB"}); err != nil {
		t.Fatal(err)
	}
	if err := envFallbacks(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"max-push-size": "64MiB", "repo-quota": "2GiB", "max-fetch-request": "512KiB"} {
		if v := cmd.Flags().Lookup(name).Value.String(); v != want {
			t.Errorf("--%s = %s, want %s", name, v, want)
		}
	}
	var stdout, stderr strings.Builder
	if code := execute(context.Background(), []string{"--help"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for _, re := range []string{
		`--max-push-size size .*\[env KNOTLESS_MAX_PUSH_SIZE\] \(default 1GiB\)`,
		`--max-fetch-request size .*\[env KNOTLESS_MAX_FETCH_REQUEST\] \(default 10MiB\)`,
		`--repo-quota size .*0: no quota.*\[env KNOTLESS_REPO_QUOTA\]`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout.String()) {
			t.Errorf("--help does not match %s:\n%s", re, stdout.String())
		}
	}
}

func TestByteSize_ReadsUnitsAndRefusesNonsense(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "512KiB": 512 << 10, "10mib": 10 << 20,
		"1GB": 1 << 30, "3 G": 3 << 30, "100B": 100} {
		var n int64
		if err := (byteSize{&n}).Set(in); err != nil || n != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for _, in := range []string{"", "-1", "ten", "1.5GiB", "9999999TiB"} {
		var n int64
		if err := (byteSize{&n}).Set(in); err == nil {
			t.Errorf("Set(%q) = %d, want an error", in, n)
		}
	}
}
