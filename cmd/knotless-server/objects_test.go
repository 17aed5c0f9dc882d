package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
)

// --object-store takes the objstore URL forms only, never credentials in
// it, and --object-store-region needs it: anything else is a usage error
// (exit 2) naming the flag, before anything starts. --help explains both
// with their variables. The failure it pins: a typo in the bucket's URL
// found only when the first run ends.
func TestObjectStore_BadURLIsAUsageErrorNamingTheFlagAndHelpExplainsIt(t *testing.T) {
	t.Setenv("KNOTLESS_DATA", t.TempDir())
	for args, want := range map[string]string{
		"--object-store ftp://store/bucket":                  "--object-store: ",
		"--object-store https://key:secret@store/bucket":     "credentials do not go in the URL",
		"--object-store https://store.example.com":           "no bucket",
		"--object-store-region eu-central-1":                 "without --object-store",
		"--object-store https://store/b?region=eu-central-1": "give the region with its own option",
	} {
		var stdout, stderr strings.Builder
		code := execute(context.Background(), strings.Fields(args), &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), want) || strings.Contains(stderr.String(), "secret") {
			t.Errorf("knotless-server %s: exit %d, stderr %q; want %d saying %q (and no secret)", args, code, stderr.String(), exitUsage, want)
		}
	}
	var stdout, stderr strings.Builder
	if code := execute(context.Background(), []string{"--help"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for _, re := range []string{
		`--object-store URL .*S3-compatible bucket at URL .*AWS_ACCESS_KEY_ID.*\[env KNOTLESS_OBJECT_STORE\]`,
		`--object-store-region string .*region .*\[env KNOTLESS_OBJECT_STORE_REGION\]`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout.String()) {
			t.Errorf("--help does not match %s", re)
		}
	}
}
