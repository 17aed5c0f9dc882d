package e2e

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
)

// The runner's own environment does not leak into steps; --env-pass (and
// its KNOTLESS_ENV_PASS form) passes named variables with the runner's
// values; LANG and TZ have defaults that --env and the workflow's env
// override, in the documented order.
func TestE2E_EnvPassGivesProxyVariablesAndNothingElseLeaks(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	r := w.registerRunner("r1")
	env := append(baseEnv(w.home),
		"HTTPS_PROXY=http://proxy.example:3128", "NO_PROXY=.internal,localhost",
		"RUNNER_ONLY=must-not-leak", "KNOTLESS_ENV_PASS=HTTPS_PROXY, NO_PROXY")
	args := []string{"run", "--state", r.state, "--executor", "shell", "--work", r.work,
		"--env", "GATE=" + w.gate, "--env", w.tag, "--env", "TZ=Europe/Berlin"}
	startProc(t, "knotless-run", env, w.root, runnerBin(), args...)

	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
env:
  LANG: en_US.UTF-8
steps:
  - run: |
      echo "https_proxy=${HTTPS_PROXY-unset}"
      echo "no_proxy=${NO_PROXY-unset}"
      echo "runner_only=${RUNNER_ONLY-unset}"
      echo "lang=$LANG tz=$TZ"
  - env: {TZ: Asia/Tokyo}
    run: echo "step tz=$TZ"
`})
	fin := w.waitFinal(run.ID, 60*time.Second)
	if fin.State != api.StateSucceeded {
		t.Fatalf("run: %s", describe(fin))
	}
	log := w.stepLog(run.ID, 1)
	for _, want := range []string{"https_proxy=http://proxy.example:3128", "no_proxy=.internal,localhost",
		"runner_only=unset", "lang=en_US.UTF-8 tz=Europe/Berlin"} {
		if !strings.Contains(log, want) {
			t.Errorf("step 1 log lacks %q:\n%s", want, log)
		}
	}
	if log := w.stepLog(run.ID, 2); !strings.Contains(log, "step tz=Asia/Tokyo") {
		t.Errorf("step 2: the step's env should win over --env:\n%s", log)
	}
}

// Without --env or the workflow, LANG and TZ default to C.UTF-8 and UTC.
func TestE2E_StepsGetLangAndTZDefaults(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - run: echo "lang=$LANG tz=$TZ"
`})
	fin := w.waitFinal(run.ID, 60*time.Second)
	if log := w.stepLog(run.ID, 1); fin.State != api.StateSucceeded || !strings.Contains(log, "lang=C.UTF-8 tz=UTC") {
		t.Fatalf("run %s; log:\n%s", describe(fin), log)
	}
}

// `knotless run show --json` has each step's start, end and duration as
// the runner measured them, the table shows them, and `run logs` footers
// end with the duration.
func TestE2E_StepTimingsInRunShowAndLogFooters(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: nap
    run: sleep 0.4
  - name: quick
    run: "true"
`})
	if fin := w.waitFinal(run.ID, 60*time.Second); fin.State != api.StateSucceeded {
		t.Fatalf("run: %s", describe(fin))
	}
	var shown api.Run
	if err := json.Unmarshal([]byte(w.cliOK("", "run", "show", strconv.FormatInt(run.ID, 10), "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	var prevEnd time.Time
	for _, st := range shown.Steps {
		if st.StartedAt == nil || st.FinishedAt == nil || st.DurationMS == nil {
			t.Fatalf("step %d (%s) has no times: %+v", st.Index, st.Name, st)
		}
		if st.StartedAt.Before(prevEnd) || st.FinishedAt.Before(*st.StartedAt) {
			t.Errorf("step %d: %s..%s overlaps the step before (ended %s)", st.Index, st.StartedAt, st.FinishedAt, prevEnd)
		}
		prevEnd = *st.FinishedAt
		if st.Name == "nap" && *st.DurationMS < 400 {
			t.Errorf("step nap took %d ms by the server's record; it sleeps 400 ms", *st.DurationMS)
		}
	}
	table := w.cliOK("", "run", "show", strconv.FormatInt(run.ID, 10))
	if !strings.Contains(table, "DURATION") || !regexp.MustCompile(`nap\s+succeeded\s+0\s+\d\d:\d\d:\d\d\.\d+\s+\d\d:\d\d:\d\d\.\d+\s+\d+(ms|s|\.\d+s)`).MatchString(table) {
		t.Errorf("run show table lacks the step's times:\n%s", table)
	}
	logs := w.cliOK("", "run", "logs", strconv.FormatInt(run.ID, 10))
	if !regexp.MustCompile(`── step 1/2: nap ──\n── succeeded, exit 0, (4\d\dms|[4-9]\d\dms|\d+(\.\d+)?s) ──\n`).MatchString(logs) {
		t.Errorf("run logs footer lacks the duration:\n%s", logs)
	}
}
