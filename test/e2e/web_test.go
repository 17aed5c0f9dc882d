package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testwait"
)

// gatedWorkflow is a workflow whose one step runs script (with $GATE and
// the run's id available).
func gatedWorkflow(script string) map[string]string {
	return map[string]string{".knotless/workflows/web.yml": "on:\n  push: {}\nsteps:\n  - name: work\n    run: |\n" +
		indent(script, "      ")}
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + l + "\n")
	}
	return b.String()
}

// waitGateScript waits for $GATE/NAME-$KNOTLESS_RUN.
func waitGateScript(name string) string {
	return fmt.Sprintf(`while [ ! -e "$GATE/%s-$KNOTLESS_RUN" ]; do sleep 0.05; done`, name)
}

func (w *world) openRunGate(name string, run int64) { w.openGate(fmt.Sprintf("%s-%d", name, run)) }

func TestBrowser_PipelinesTabListsPushAndRunPageFollowsLog(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, 10*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(gatedWorkflow("echo first-line\n" + waitGateScript("go") + "\necho second-line\n"))
	signIn(t, ctx, w.url, w.token)

	do(t, ctx, "open the Pipelines tab", chromedp.Navigate(w.url+"/"+w.repo))
	waitText(t, ctx, 30*time.Second, "e2e change") // the commit's subject
	waitText(t, ctx, 30*time.Second, "main")
	if n := eval[int](t, ctx, fmt.Sprintf(`document.querySelectorAll('a[href="/-/runs/%d"]').length`, run.ID)); n != 1 {
		t.Fatalf("the Pipelines tab links run %d %d times, want once", run.ID, n)
	}

	do(t, ctx, "open the run page", chromedp.Navigate(fmt.Sprintf("%s/-/runs/%d", w.url, run.ID)))
	testwait.Until(t, 60*time.Second, "first-line in the page while the step runs", func() (bool, string) {
		lines, err := tryEval[[]string](ctx, `Array.from(document.querySelectorAll('#step-1 .l .t')).map(e => e.textContent)`)
		return err == nil && contains(lines, "first-line"), fmt.Sprint(lines, err)
	})
	// The step is still waiting for its gate: the line came live.
	if r := w.run(run.ID); api.IsFinal(r.State) || stepState(r, 1) != api.StepRunning {
		t.Fatalf("step 1 is %s (run %s) when its first line showed, want still running", stepState(r, 1), r.State)
	}
	if lines := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#step-1 .l .t')).map(e => e.textContent)`); contains(lines, "second-line") {
		t.Fatal("second-line shown before the step printed it")
	}
	screenshots(t, ctx, "run-running")
	w.openRunGate("go", run.ID)
	waitText(t, ctx, 60*time.Second, "second-line")
	testwait.Until(t, 60*time.Second, "the page to show the run succeeded", func() (bool, string) {
		s, err := tryEval[string](ctx, `document.getElementById('run-state').textContent`)
		return s == api.StateSucceeded, fmt.Sprint(s, err)
	})
	if lines := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#step-1 .l .t')).map(e => e.textContent)`); strings.Join(lines, "|") != "first-line|second-line" {
		t.Fatalf("step 1's lines in the page: %q, want exactly first-line, second-line", lines)
	}
	// Lines are numbered from 1 (they once started at 0).
	if nums := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#step-1 .l .n')).map(e => e.textContent)`); strings.Join(nums, ",") != "1,2" {
		t.Fatalf("step 1's line numbers: %q, want 1, 2", nums)
	}
	screenshots(t, ctx, "run")
	do(t, ctx, "back to the Pipelines tab", chromedp.Navigate(w.url+"/"+w.repo))
	waitText(t, ctx, 30*time.Second, "succeeded")
	// A new pipeline shows up without a reload.
	eval[bool](t, ctx, `window.stayed = true`)
	second := w.pushOne(gatedWorkflow("echo second pipeline"))
	testwait.Until(t, 30*time.Second, "pipeline 2 in the open Pipelines tab", func() (bool, string) {
		n, err := tryEval[int](ctx, fmt.Sprintf(`document.querySelectorAll('a[href="/-/runs/%d"]').length`, second.ID))
		return n == 1, fmt.Sprint(n, err)
	})
	if !eval[bool](t, ctx, `window.stayed === true`) {
		t.Fatal("the Pipelines tab reloaded itself")
	}
	w.waitFinal(second.ID, 60*time.Second)
	screenshots(t, ctx, "pipelines")
}

func TestBrowser_LongLogShowsTailAndLoadsEarlierLines(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, 10*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(gatedWorkflow("seq 1 60000")) // 338,894 bytes: more than the 256 KiB shown at first
	if got := w.waitFinal(run.ID, 60*time.Second); got.State != api.StateSucceeded {
		t.Fatal(describe(got))
	}
	signIn(t, ctx, w.url, w.token)
	do(t, ctx, "open the run page", chromedp.Navigate(fmt.Sprintf("%s/-/runs/%d", w.url, run.ID)))
	testwait.Until(t, 30*time.Second, "the stream to end", func() (bool, string) {
		s, err := tryEval[string](ctx, `document.documentElement.dataset.stream`)
		return s == "ended", fmt.Sprint(s, err)
	})
	first := eval[string](t, ctx, `document.querySelector('#step-1 .l .t').textContent`)
	if first == "1" || eval[string](t, ctx, `Array.from(document.querySelectorAll('#step-1 .l .t')).pop().textContent`) != "60000" {
		t.Fatalf("the page shows the log from %q, want its tail only, up to 60000", first)
	}
	do(t, ctx, "press Load earlier lines", chromedp.Click(chromedp.CSS("#step-1 button.earlier")))
	testwait.Until(t, 30*time.Second, "the log's first line", func() (bool, string) {
		s, err := tryEval[string](ctx, `document.querySelector('#step-1 .l .t').textContent`)
		return s == "1", fmt.Sprint(s, err)
	})
	if ok := eval[bool](t, ctx, `(function () {
  var ts = document.querySelectorAll('#step-1 .l .t'), ns = document.querySelectorAll('#step-1 .l .n');
  if (ts.length !== 60000) return false;
  for (var i = 0; i < ts.length; i++) if (ts[i].textContent !== String(i + 1) || ns[i].textContent !== String(i + 1)) return false;
  return document.querySelector('#step-1 button.earlier').hidden;
})()`); !ok {
		t.Fatal("after loading earlier lines the step does not show 1..60000 once each, numbered, with the button gone")
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func stepState(r api.Run, index int) string {
	for _, s := range r.Steps {
		if s.Index == index {
			return s.State
		}
	}
	return ""
}

func TestBrowser_ReconnectMidLogNeitherRepeatsNorLosesLines(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, 30*time.Second)
	w.startRunner(w.registerRunner("r1"))
	script := "for i in 1 2 3 4 5; do echo line-$i; done\n" + waitGateScript("a") +
		"\nfor i in 6 7 8 9 10; do echo line-$i; done\n" + waitGateScript("b") +
		"\nfor i in 11 12 13 14 15; do echo line-$i; done\n"
	run := w.pushOne(gatedWorkflow(script))
	signIn(t, ctx, w.url, w.token)
	do(t, ctx, "open the run page", chromedp.Navigate(fmt.Sprintf("%s/-/runs/%d", w.url, run.ID)))
	lines := func() ([]string, error) {
		return tryEval[[]string](ctx, `Array.from(document.querySelectorAll('#step-1 .l .t')).map(e => e.textContent)`)
	}
	testwait.Until(t, 60*time.Second, "line-5 in the page", func() (bool, string) {
		l, err := lines()
		return err == nil && contains(l, "line-5"), fmt.Sprint(l, err)
	})
	// The server goes away under the open stream; the step prints more
	// meanwhile (the runner keeps it until the server is back).
	w.stopServer()
	testwait.Until(t, 20*time.Second, "the page to notice", func() (bool, string) {
		s, err := tryEval[string](ctx, `document.documentElement.dataset.stream`)
		return s == "reconnecting", fmt.Sprint(s, err)
	})
	w.openRunGate("a", run.ID)
	w.restartServer()
	testwait.Until(t, 60*time.Second, "line-10 in the page after the reconnect", func() (bool, string) {
		l, err := lines()
		return err == nil && contains(l, "line-10"), fmt.Sprint(l, err)
	})
	w.openRunGate("b", run.ID)
	w.waitFinal(run.ID, 60*time.Second)
	testwait.Until(t, 30*time.Second, "line-15 in the page", func() (bool, string) {
		l, err := lines()
		return err == nil && contains(l, "line-15"), fmt.Sprint(l, err)
	})
	var want []string
	for i := 1; i <= 15; i++ {
		want = append(want, fmt.Sprintf("line-%d", i))
	}
	got, err := lines()
	if err != nil || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("lines in the page after a reconnect: %q (%v), want each of line-1..line-15 once, in order", got, err)
	}
}

func TestBrowser_CancelFromRunPageEndsRunCancelled(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, 10*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(gatedWorkflow("echo waiting\n" + waitGateScript("never")))
	signIn(t, ctx, w.url, w.token)
	do(t, ctx, "open the run page", chromedp.Navigate(fmt.Sprintf("%s/-/runs/%d", w.url, run.ID)))
	waitText(t, ctx, 60*time.Second, "waiting")
	// With the keyboard only: Tab to the button, then Enter.
	tabs := 0
	for ; tabs < 40 && !eval[bool](t, ctx, `document.activeElement !== null && document.activeElement.closest('#cancel') !== null`); tabs++ {
		do(t, ctx, "press Tab", chromedp.KeyEvent(kb.Tab))
	}
	if tabs == 40 {
		t.Fatal("Tab never reached the Cancel run button")
	}
	do(t, ctx, "press Enter on Cancel run", chromedp.KeyEvent(kb.Enter))
	got := w.waitFinal(run.ID, 60*time.Second)
	if got.State != api.StateCancelled {
		t.Fatalf("after Cancel run on the page: %s, want cancelled", describe(got))
	}
	testwait.Until(t, 30*time.Second, "the page to show cancelled", func() (bool, string) {
		s, err := tryEval[string](ctx, `document.getElementById('run-state').textContent`)
		return s == api.StateCancelled, fmt.Sprint(s, err)
	})
	if hidden := eval[bool](t, ctx, `document.getElementById('cancel').hidden`); !hidden {
		t.Error("the Cancel button still shows on a cancelled run")
	}
}

func TestBrowser_RunnerApprovedFromPageClaimsRun(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, 10*time.Second)
	// Log a runner in, but approve it from the page, not the CLI.
	r := &runnerID{name: "pending-1", state: filepath.Join(w.root, "pending-1.json"), work: filepath.Join(w.root, "pending-1-work")}
	token := strings.TrimSpace(w.cliOK("", "runner", "token", "--repo", w.repo))
	cmd := exec.Command(runnerBin(), "login", "--server", w.url, "--repo", w.repo, "--name", r.name, "--labels", "linux,web", "--state", r.state)
	cmd.Env = append(baseEnv(w.home), "KNOTLESS_REGISTRATION_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("knotless-run login: %v\n%s", err, out)
	}
	prefix := "knotless runner approve " + r.name + " --repo " + w.repo + " --did "
	i := strings.Index(string(out), prefix)
	if i < 0 {
		t.Fatalf("login printed no approve command with --did:\n%s", out)
	}
	did := strings.Fields(string(out)[i+len(prefix):])[0]
	w.startRunner(r)
	run := w.pushOne(gatedWorkflow("echo hello from the approved runner"))
	signIn(t, ctx, w.url, w.token)
	do(t, ctx, "open the Runners tab", chromedp.Navigate(w.url+"/"+w.repo+"/-/runners"))
	waitText(t, ctx, 30*time.Second, "pending approval")
	if shown := eval[string](t, ctx, `document.querySelector('#runner-pending-1 .did-value').textContent`); shown != did {
		t.Fatalf("the approve button shows DID %q, login printed %q", shown, did)
	}
	screenshots(t, ctx, "runners-pending")
	if got := w.run(run.ID); got.State != api.StateQueued {
		t.Fatalf("before approval: %s, want queued", describe(got))
	}
	do(t, ctx, "press Approve", chromedp.Click(chromedp.CSS("#runner-pending-1 form.approve button")))
	waitText(t, ctx, 30*time.Second, "approved pending-1")
	got := w.waitFinal(run.ID, 90*time.Second)
	if got.State != api.StateSucceeded || got.Runner != "pending-1" {
		t.Fatalf("after approval from the page: %s by %q, want succeeded by pending-1", describe(got), got.Runner)
	}
	do(t, ctx, "reload the Runners tab", chromedp.Navigate(w.url+"/"+w.repo+"/-/runners"))
	waitText(t, ctx, 30*time.Second, "online")
	waitText(t, ctx, 5*time.Second, "shell")
	screenshots(t, ctx, "runners")
}

func TestBrowser_AccountWithoutAccessSees404(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, 10*time.Second)
	run := w.pushOne(gatedWorkflow("echo private"))
	var bob string
	for _, f := range strings.Fields(w.cliOK("", "account", "create", "bob")) {
		if strings.HasPrefix(f, "knl_") {
			bob = f
		}
	}
	signIn(t, ctx, w.url, bob)
	for _, p := range []string{"/" + w.repo, "/" + w.repo + "/-/runners", fmt.Sprintf("/-/runs/%d", run.ID)} {
		do(t, ctx, "open "+p, chromedp.Navigate(w.url+p))
		title := eval[string](t, ctx, `document.title`)
		if !strings.HasPrefix(title, "Not Found") {
			t.Errorf("bob opens %s: title %q, want Not Found", p, title)
		}
		if text := eval[string](t, ctx, `document.body.innerText`); strings.Contains(text, "private") || strings.Contains(text, "e2e change") {
			t.Errorf("bob's 404 page for %s tells about the repository:\n%s", p, text)
		}
	}
}

func TestBrowser_HostileLogRendersAsText(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, 10*time.Second)
	w.startRunner(w.registerRunner("r1"))
	script := `echo '<script>document.title="pwned";window.pwned=1</script>'
echo '<img src=x onerror="document.title=1;window.pwned=2">'
printf '\033[31mred-text\033[0m plain\n'
printf 'bad-\377\376-utf8\n'
printf '\033]0;osc-title\007after-osc\n'
printf 'bell\007 and \033[2J clear\n'`
	run := w.pushOne(gatedWorkflow(script))
	if got := w.waitFinal(run.ID, 60*time.Second); got.State != api.StateSucceeded {
		t.Fatalf("%s; log:\n%s", describe(got), w.stepLog(run.ID, 1))
	}
	signIn(t, ctx, w.url, w.token)
	do(t, ctx, "open the run page", chromedp.Navigate(fmt.Sprintf("%s/-/runs/%d", w.url, run.ID)))
	testwait.Until(t, 30*time.Second, "the stream to end", func() (bool, string) {
		s, err := tryEval[string](ctx, `document.documentElement.dataset.stream`)
		return s == "ended", fmt.Sprint(s, err)
	})
	lines := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#step-1 .l .t')).map(e => e.textContent)`)
	want := []string{
		`<script>document.title="pwned";window.pwned=1</script>`,
		`<img src=x onerror="document.title=1;window.pwned=2">`,
		"red-text plain",
		"bad-\uFFFD-utf8", // one replacement character for the run of invalid bytes
		"after-osc",
		"bell\u2407 and  clear",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines shown:\n%q\nwant:\n%q", lines, want)
	}
	if title := eval[string](t, ctx, `document.title`); !strings.HasPrefix(title, fmt.Sprintf("Run %d", run.ID)) {
		t.Fatalf("page title became %q", title)
	}
	if p := eval[bool](t, ctx, `window.pwned !== undefined`); p {
		t.Fatal("a script from the log ran")
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('.log script, .log img').length`); n != 0 {
		t.Fatalf("the log made %d elements", n)
	}
	if cls := eval[string](t, ctx, `Array.from(document.querySelectorAll('#step-1 .t span')).find(s => s.textContent === 'red-text').className`); cls != "f1" {
		t.Fatalf("red-text has class %q, want f1 (red)", cls)
	}
}
