package cli

import (
	"path/filepath"
	"testing"
)

// `knotless workflow lint` checks on.schedule as the server will: a
// workflow that runs only on its schedules is fine, and each wrong cron,
// zone and branch is one FILE:LINE:COL line at its value, with no server.
func TestWorkflowLint_ScheduleErrorsAtFileLineCol(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".knotless/workflows/nightly.yml"), `on:
  schedule:
    - cron: "0 3 * * *"
      timezone: Europe/Berlin
      branch: release
steps: [{run: make nightly}]
`)
	if r := runCLI(t, env{}, dir, nil, "workflow", "lint"); r.code != ExitOK || r.stdout != "1 workflow OK\n" {
		t.Fatalf("a scheduled workflow: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	bad := filepath.Join(dir, "bad.yml")
	writeFile(t, bad, `on:
  schedule:
    - cron: "0 3 * * * *"
    - cron: "0 3 * * *"
      timezone: Local
      branch: refs/heads/release
steps: [{run: make nightly}]
`)
	r := runCLI(t, env{}, "", nil, "workflow", "lint", bad)
	want := bad + `:3:13: schedule 1 cron: "0 3 * * * *" is not a cron expression: it has 6 fields, not 5; write five fields (minute hour day-of-month month day-of-week) or a name such as @daily
` + bad + `:5:17: schedule 2 timezone Local depends on the server's host; name an IANA zone such as Europe/Berlin, or leave it out for UTC
` + bad + `:6:15: schedule 2 branch names the branch without its prefix: write "release", not "refs/heads/release"
`
	if r.code != ExitFailed || r.stdout != want {
		t.Errorf("exit %d, stdout\n%s\nwant exit 1 and\n%s", r.code, r.stdout, want)
	}
}
