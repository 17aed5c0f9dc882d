package e2e

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"knotless.dev/knotless/internal/api"
)

// byWorkflow indexes runs by their workflow name.
func byWorkflow(runs []api.Run) map[string]api.Run {
	out := map[string]api.Run{}
	for _, r := range runs {
		out[r.Workflow] = r
	}
	return out
}

// graphWorkflows are a build, a matrix of two needing it, and a deploy
// needing the matrix: a built file and exported values flow down.
var graphWorkflows = map[string]string{
	".knotless/workflows/build.yml": `on: {push: {}, manual: {}}
outputs: [dist/]
steps:
  - run: |
      mkdir -p dist && echo "app built from $KNOTLESS_SHA" > dist/app.txt
      echo "VERSION=1.2.3" >> "$KNOTLESS_EXPORT"
`,
	".knotless/workflows/test.yml": `on: {push: {}}
matrix:
  os: [linux, arm]
needs: [build]
outputs: ["report-{{ matrix.os }}.txt"]
steps:
  - run: |
      . .knotless/needs/build.env
      { cat .knotless/needs/build/dist/app.txt; echo "tested $VERSION on {{ matrix.os }}"; } > report-{{ matrix.os }}.txt
      echo "TESTED_{{ matrix.os }}=yes" >> "$KNOTLESS_EXPORT"
`,
	".knotless/workflows/deploy.yml": `on: {push: {}, manual: {}}
needs: [test]
steps:
  - run: |
      cat .knotless/needs/test/linux/report-linux.txt .knotless/needs/test/arm/report-arm.txt
      cat .knotless/needs/test/linux.env .knotless/needs/test/arm.env
`,
}

// needs: through server, runner and CLI on the shell executor: the deploy
// run starts only once both runs of the matrix it needs succeeded, finds
// their outputs (with the file build made) and every exported value in its
// checkout; the CLI shows the pipeline's graph; a manual trigger of deploy
// alone runs what it needs.
func TestE2E_NeedsPassesABuiltFileAndAnExportedValueDownAMatrix(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 10*time.Second)
	w.startRunner(w.registerRunner("r1"), "--capacity", "2")
	runs := byWorkflow(w.push(graphWorkflows, 4))
	build, linux, arm, deploy := runs["build"], runs["test (linux)"], runs["test (arm)"], runs["deploy"]
	if deploy.ID == 0 || linux.ID == 0 || arm.ID == 0 {
		t.Fatalf("pipeline runs: %+v", runs)
	}
	d := w.waitFinal(deploy.ID, 3*time.Minute)
	if d.State != api.StateSucceeded {
		t.Fatalf("%s; setup log:\n%s", describe(d), w.stepLog(deploy.ID, api.SetupStep))
	}
	b := w.run(build.ID)
	for _, m := range []api.Run{w.run(linux.ID), w.run(arm.ID)} {
		if m.State != api.StateSucceeded || m.StartedAt == nil || b.FinishedAt == nil || m.StartedAt.Before(*b.FinishedAt) {
			t.Errorf("%s started %v, build finished %v: want it after build succeeded", describe(m), m.StartedAt, b.FinishedAt)
		}
		if d.StartedAt.Before(*m.FinishedAt) {
			t.Errorf("deploy started %v before %s finished %v", d.StartedAt, m.Workflow, m.FinishedAt)
		}
	}
	want := fmt.Sprintf("app built from %s\ntested 1.2.3 on linux\napp built from %[1]s\ntested 1.2.3 on arm\nTESTED_linux=yes\nTESTED_arm=yes\n", b.SHA)
	if got := w.stepLog(deploy.ID, 1); got != want {
		t.Errorf("deploy's step log:\n%s\nwant:\n%s", got, want)
	}
	if setup := w.stepLog(deploy.ID, api.SetupStep); !strings.Contains(setup, "needs test: run ") || !strings.Contains(setup, "verified) in .knotless/needs/test/arm/") {
		t.Errorf("deploy's setup log does not say what it received:\n%s", setup)
	}
	if b.Exports["VERSION"] != "1.2.3" {
		t.Errorf("build's exports: %v", b.Exports)
	}
	if len(d.Needs) != 2 || d.Needs[0].Name != "test" {
		t.Errorf("deploy's needs: %+v", d.Needs)
	}

	graph := w.cliOK("", "run", "list", "--repo", w.repo, "--pipeline", "latest")
	for _, want := range []string{"STAGE", "test (matrix, 2 runs)", "2 succeeded", "build"} {
		if !strings.Contains(graph, want) {
			t.Errorf("run list --pipeline lacks %q:\n%s", want, graph)
		}
	}
	if lines := strings.Split(graph, "\n"); !slices.ContainsFunc(lines, func(l string) bool {
		return strings.HasPrefix(l, "3 ") && strings.Contains(l, "deploy") && strings.Contains(l, "test")
	}) {
		t.Errorf("deploy is not in stage 3, needing test:\n%s", graph)
	}
	if show := w.cliOK("", "run", "show", fmt.Sprint(build.ID)); !strings.Contains(show, "Exports:") || !strings.Contains(show, "VERSION=1.2.3") {
		t.Errorf("run show of build lacks its exports:\n%s", show)
	}
	if show := w.cliOK("", "run", "show", fmt.Sprint(linux.ID)); !strings.Contains(show, "Matrix:") || !strings.Contains(show, "os=linux") {
		t.Errorf("run show of a matrix run lacks its values:\n%s", show)
	}

	// A manual trigger of deploy alone runs build and the matrix too
	// (test has no manual trigger: what deploy needs runs all the same).
	var p api.Pipeline
	out := w.cliOK("", "run", "trigger", "--repo", w.repo, "--workflow", "deploy", "--json")
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("run trigger --json: %v\n%s", err, out)
	}
	var names []string
	for _, r := range p.Runs {
		names = append(names, r.Workflow)
	}
	slices.Sort(names)
	if strings.Join(names, ",") != "build,deploy,test (arm),test (linux)" {
		t.Fatalf("trigger of deploy made runs %v, want deploy with what it needs", names)
	}
	for _, r := range p.Runs {
		if f := w.waitFinal(r.ID, 3*time.Minute); f.State != api.StateSucceeded {
			t.Errorf("triggered %s", describe(f))
		}
	}
}

// A need that fails skips the run that needs it, saying why; a step that
// exits 3 is never retried, whatever retry: says.
func TestE2E_FailedNeedSkipsTheDependentAndAStepExiting3IsNeverRetried(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 10*time.Second)
	w.startRunner(w.registerRunner("r1"))
	runs := byWorkflow(w.push(map[string]string{
		".knotless/workflows/build.yml":  "on: {push: {}}\nretry: 2\nsteps:\n  - run: exit 3\n",
		".knotless/workflows/deploy.yml": "on: {push: {}}\nneeds: [build]\nsteps:\n  - run: echo never\n",
	}, 2))
	build, deploy := runs["build"], runs["deploy"]
	res := w.cli("", "run", "logs", "--repo", w.repo, "--latest", "-f", "--timeout", "2m")
	if res.code != 1 {
		t.Fatalf("run logs -f: exit %d, want 1\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	b, d := w.run(build.ID), w.run(deploy.ID)
	if b.State != api.StateFailed || b.Reason != api.ReasonExitCode || b.ExitCode == nil || *b.ExitCode != 3 || b.RetriedBy != 0 {
		t.Errorf("build: %s retried by %d; want failed, exit 3, never retried", describe(b), b.RetriedBy)
	}
	wantMsg := fmt.Sprintf("needs run %d (build), which ended failed (exit-code)", build.ID)
	if d.State != api.StateSkipped || d.Reason != api.ReasonNeedFailed || d.Message != wantMsg {
		t.Errorf("deploy: %s, want skipped/need-failed %q", describe(d), wantMsg)
	}
	if !strings.Contains(res.stdout, fmt.Sprintf("run %d (deploy): skipped, need-failed: %s", deploy.ID, wantMsg)) {
		t.Errorf("run logs -f does not say why deploy was skipped:\n%s", res.stdout)
	}
	if n := len(w.runs(build.Pipeline)); n != 2 {
		t.Errorf("the pipeline has %d runs, want 2 (no retry)", n)
	}
}

// A fault no attempt can mend is never retried, whatever retry: says, and
// says why where the user looks: arch: of another architecture on a shell
// runner (whose steps run on its own host) ends errored/unsupported once,
// and run show and the run's page (in a browser) say "Not retried". (Before, it ended
// errored/executor and was retried twice, holding the runner each time.)
func TestE2E_UnsupportedRunIsNeverRetriedAndSaysWhy(t *testing.T) {
	t.Parallel()
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	w := newWorld(t, 10*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": "on: {push: {}}\nretry: 2\narch: " + other + "\nsteps:\n  - run: echo never\n"})
	f := w.waitFinal(run.ID, time.Minute)
	if f.State != api.StateErrored || f.Reason != api.ReasonUnsupported || !strings.Contains(f.Message, "arch: "+other) || f.RetriedBy != 0 {
		t.Fatalf("%s, retried by %d; want errored/unsupported naming arch: %s, never retried", describe(f), f.RetriedBy, other)
	}
	if !strings.Contains(f.NotRetried, "unsupported is never retried") {
		t.Errorf("the run does not say why it was not retried: %q", f.NotRetried)
	}
	if out := w.cliOK("", "run", "show", fmt.Sprint(run.ID)); !strings.Contains(out, "Not retried:") || !strings.Contains(out, "unsupported is never retried") {
		t.Errorf("run show does not say why the run was not retried:\n%s", out)
	}
	ctx := newBrowser(t)
	signIn(t, ctx, w.url, w.token)
	do(t, ctx, "open the run page", chromedp.Navigate(fmt.Sprintf("%s/-/runs/%d", w.url, run.ID)))
	waitText(t, ctx, 30*time.Second, "unsupported is never retried")
	// A last look: no attempt came meanwhile.
	if n := len(w.runs(run.Pipeline)); n != 1 {
		t.Errorf("the pipeline has %d runs, want 1 (no retry)", n)
	}
}

// A run cancelled while it runs is never retried, whatever retry: says.
func TestE2E_CancelledRunIsNeverRetried(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 10*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": "on: {push: {}}\nretry: 3\nsteps:\n  - run: |\n      touch \"$GATE/cancel-me\"\n      sleep 600\n"})
	w.waitGate(run.ID, "cancel-me", time.Minute)
	w.cliOK("", "run", "cancel", fmt.Sprint(run.ID))
	f := w.waitFinal(run.ID, time.Minute)
	if f.State != api.StateCancelled || f.RetriedBy != 0 {
		t.Fatalf("%s, retried by %d; want cancelled, never retried", describe(f), f.RetriedBy)
	}
	if n := len(w.runs(run.Pipeline)); n != 1 {
		t.Errorf("the pipeline has %d runs, want 1", n)
	}
}

// A run whose runner was SIGKILLed ends errored/runner-lost when its lease
// lapses and, with retry: on runner-lost, is retried as a new attempt that
// starts only once the environment of the first is gone: the runner's next
// process sweeps it (the first attempt's step is killed) and says so; then
// the second attempt runs and succeeds.
func TestE2E_RunnerLostRunIsRetriedOnceItsEnvironmentIsSwept(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2*time.Second)
	rid := w.registerRunner("r1")
	first := w.startRunner(rid)
	sleepArg := "600." + fmt.Sprint(time.Now().UnixNano()%1_000_000_007)
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on: {push: {}}
retry: {max: 1, when: [runner-lost]}
steps:
  - run: |
      if [ "$KNOTLESS_ATTEMPT" = 1 ]; then
        touch "$GATE/first"
        sleep ` + sleepArg + `
      fi
      touch "$GATE/second-$KNOTLESS_RUN"
      while [ ! -e "$GATE/go-$KNOTLESS_RUN" ]; do sleep 0.05; done
      echo "attempt $KNOTLESS_ATTEMPT ok"
`})
	w.waitGate(run.ID, "first", time.Minute)
	first.signal(t, syscall.SIGKILL)
	first.wait(t, 10*time.Second)
	lost := w.waitRun(run.ID, 30*time.Second, "errored and retried", func(r api.Run) bool { return api.IsFinal(r.State) })
	if lost.State != api.StateErrored || lost.Reason != api.ReasonRunnerLost || lost.RetriedBy == 0 {
		t.Fatalf("%s retried by %d; want errored/runner-lost and a retry", describe(lost), lost.RetriedBy)
	}
	retry := w.run(lost.RetriedBy)
	if retry.State != api.StateQueued || retry.Attempt != 2 || retry.RetryOf != run.ID || retry.Workflow != run.Workflow {
		t.Fatalf("retry: %s attempt %d of %d", describe(retry), retry.Attempt, retry.RetryOf)
	}
	if !strings.Contains(retry.Message, fmt.Sprintf("waiting for the environment of run %d", run.ID)) {
		t.Errorf("the waiting retry says %q", retry.Message)
	}
	if pids := pidsWithArg(sleepArg); len(pids) == 0 {
		t.Fatal("the first attempt's step is gone before any sweep: the test proves nothing")
	}
	w.startRunner(rid)
	w.waitGate(retry.ID, fmt.Sprintf("second-%d", retry.ID), time.Minute)
	if pids := pidsWithArg(sleepArg); len(pids) > 0 {
		t.Errorf("the second attempt runs while the first's step still does (pids %v)", pids)
	}
	w.openGate(fmt.Sprintf("go-%d", retry.ID))
	done := w.waitFinal(retry.ID, time.Minute)
	if done.State != api.StateSucceeded || w.stepLog(retry.ID, 1) != "attempt 2 ok\n" {
		t.Fatalf("%s, log %q", describe(done), w.stepLog(retry.ID, 1))
	}
	if show := w.cliOK("", "run", "show", fmt.Sprint(retry.ID)); !strings.Contains(show, fmt.Sprintf("2, a retry of run %d", run.ID)) {
		t.Errorf("run show of the retry:\n%s", show)
	}
}

// The Pipelines view in Chromium shows a pipeline as its graph: a build,
// a matrix of three needing it (one of its runs retried after its runner
// was lost, both attempts shown), and a deploy needing the matrix, stage
// after stage. The screenshot is docs/img/pipeline-graph.png.
func TestBrowser_PipelineGraphShowsStagesMatrixAndAttempts(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, 2*time.Second)
	rid := w.registerRunner("r1")
	first := w.startRunner(rid, "--capacity", "3")
	files := map[string]string{
		".knotless/workflows/build.yml": graphWorkflows[".knotless/workflows/build.yml"],
		".knotless/workflows/test.yml": `on: {push: {}}
matrix:
  os: [linux, arm, riscv]
needs: [build]
retry: {max: 1, when: [runner-lost]}
steps:
  - run: |
      if [ "{{ matrix.os }}" = arm ] && [ "$KNOTLESS_ATTEMPT" = 1 ]; then touch "$GATE/arm"; sleep 600; fi
      echo "tested on {{ matrix.os }}"
`,
		".knotless/workflows/deploy.yml": "on: {push: {}}\nneeds: [test]\nsteps:\n  - run: echo deployed\n",
		".knotless/workflows/lint.yml":   "on: {push: {}}\nsteps:\n  - run: echo linted\n",
	}
	runs := byWorkflow(w.push(files, 6))
	arm := runs["test (arm)"]
	w.waitGate(arm.ID, "arm", 2*time.Minute)
	for _, other := range []string{"test (linux)", "test (riscv)", "lint"} { // their results delivered: only arm is lost
		w.waitFinal(runs[other].ID, time.Minute)
	}
	first.signal(t, syscall.SIGKILL)
	first.wait(t, 10*time.Second)
	lost := w.waitRun(arm.ID, 30*time.Second, "retried", func(r api.Run) bool { return r.RetriedBy != 0 })
	w.startRunner(rid, "--capacity", "3")
	if d := w.waitFinal(runs["deploy"].ID, 2*time.Minute); d.State != api.StateSucceeded {
		t.Fatalf("%s; the retry: %s", describe(d), describe(w.run(lost.RetriedBy)))
	}

	signIn(t, ctx, w.url, w.token)
	do(t, ctx, "open the Pipelines tab", chromedp.Navigate(w.url+"/"+w.repo))
	waitText(t, ctx, 30*time.Second, "deploy")
	stages := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('.graph .stage')).map(s =>
		Array.from(s.querySelectorAll('.job')).map(j => j.dataset.workflow).join('+'))`)
	if strings.Join(stages, " → ") != "build+lint → test → deploy" {
		t.Errorf("stages in the page: %q, want build+lint → test → deploy", stages)
	}
	matrixRuns := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('.job.matrix ul.runs > li')).map(li => li.textContent.replace(/\s+/g, ' ').trim())`)
	if len(matrixRuns) != 3 {
		t.Fatalf("the matrix box lists %d runs, want 3: %q", len(matrixRuns), matrixRuns)
	}
	if !strings.Contains(matrixRuns[1], "errored arm") || !strings.Contains(matrixRuns[1], "↻") || !strings.Contains(matrixRuns[1], "succeeded arm attempt 2") {
		t.Errorf("the arm run's row: %q, want its errored first attempt, then attempt 2 succeeded", matrixRuns[1])
	}
	if strings.Contains(matrixRuns[0]+matrixRuns[2], "↻") {
		t.Errorf("runs never retried show a retry: %q", matrixRuns)
	}
	for _, id := range []int64{arm.ID, lost.RetriedBy} {
		if n := eval[int](t, ctx, fmt.Sprintf(`document.querySelectorAll('.job.matrix a[href="/-/runs/%d"]').length`, id)); n != 1 {
			t.Errorf("the matrix box links run %d %d times, want once", id, n)
		}
	}
	if needs := eval[string](t, ctx, `document.querySelector('.job[data-workflow="deploy"] .needs').textContent`); needs != "needs test" {
		t.Errorf("deploy's box says %q, want \"needs test\"", needs)
	}
	screenshots(t, ctx, "pipeline-graph")
}
