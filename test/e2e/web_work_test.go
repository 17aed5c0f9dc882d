package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/chromedp/chromedp"
	"golang.org/x/text/unicode/rangetable"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testwait"
)

// Browser tests of what an operator works from in the web view (issue 25
// item 3): re-run buttons, the Pipelines tab's filters and commit links,
// a time on each log line, where a runner restart shows in a step's log,
// the runner's real build, hidden characters shown escaped, and a long
// finished log's page.

// workflowFile is a workflow running script in one step named name.
func workflowFile(name, script string) string {
	return "name: " + name + "\non:\n  push: {}\nsteps:\n  - name: " + name + "-step\n    run: |\n" + indent(script, "      ")
}

// passAndFail is two workflows: pass succeeds, fail exits 3.
func passAndFail() map[string]string {
	return map[string]string{
		".knotless/workflows/pass.yml": workflowFile("pass", "echo fine"),
		".knotless/workflows/fail.yml": workflowFile("fail", "echo broken; exit 3"),
	}
}

// openRun opens run id's page and waits for its event stream to end (a
// run that is over).
func openRun(t *testing.T, ctx context.Context, w *world, id int64) {
	t.Helper()
	do(t, ctx, "open the run page", chromedp.Navigate(fmt.Sprintf("%s/-/runs/%d", w.url, id)))
	testwait.Until(t, 30*time.Second, "the stream to end", func() (bool, string) {
		s, err := tryEval[string](ctx, `document.documentElement.dataset.stream`)
		return s == "ended", fmt.Sprint(s, err)
	})
}

// openSucceededRun starts a world with a runner, pushes a workflow whose
// step runs script, waits for its run to succeed and opens its page in a
// signed-in browser.
func openSucceededRun(t *testing.T, script string) (context.Context, *world, api.Run) {
	t.Helper()
	ctx := newBrowser(t)
	w := newWorld(t, 10*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(gatedWorkflow(script))
	if got := w.waitFinal(run.ID, 60*time.Second); got.State != api.StateSucceeded {
		t.Fatal(describe(got))
	}
	signIn(t, ctx, w.url, w.token)
	openRun(t, ctx, w, run.ID)
	return ctx, w, run
}

// assertEveryLineTimed checks that every log line of the page has a time.
func assertEveryLineTimed(t *testing.T, ctx context.Context) {
	t.Helper()
	if untimed := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('.l')).filter(l => !l.querySelector('.ts').dataset.ms).map(l => l.id)`); len(untimed) > 0 {
		t.Errorf("lines without a time: %q", untimed)
	}
}

// currentPath is the page's path and query.
func currentPath(ctx context.Context) string {
	s, _ := tryEval[string](ctx, `location.pathname + location.search`)
	return s
}

func TestBrowser_RerunButtonsRunAFinishedRunAndAPipelinesFailedRunsAgain(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, 10*time.Second)
	w.startRunner(w.registerRunner("r1"))
	runs := w.push(passAndFail(), 2)
	var fail api.Run
	for _, r := range runs {
		if got := w.waitFinal(r.ID, 60*time.Second); r.Workflow == "fail" {
			fail = got
		}
	}
	if fail.State != api.StateFailed {
		t.Fatalf("the failing workflow: %s", describe(fail))
	}
	signIn(t, ctx, w.url, w.token)
	openRun(t, ctx, w, fail.ID)
	if hidden := eval[bool](t, ctx, `document.getElementById('rerun').hidden`); hidden {
		t.Fatal("a failed run's page hides its Re-run button")
	}
	do(t, ctx, "press Re-run", chromedp.Click(chromedp.CSS("#rerun button")))
	var again int64
	testwait.Until(t, 30*time.Second, "the new run's page", func() (bool, string) {
		p := currentPath(ctx)
		id, err := strconv.ParseInt(strings.TrimPrefix(p, "/-/runs/"), 10, 64)
		again = id
		return err == nil && id > fail.ID, p
	})
	if got := w.waitFinal(again, 60*time.Second); got.Workflow != "fail" || got.PipelineRerunOf != fail.Pipeline || got.State != api.StateFailed {
		t.Fatalf("the re-run: %s of %q re-running pipeline %d, want the failing workflow again re-running %d", describe(got), got.Workflow, got.PipelineRerunOf, fail.Pipeline)
	}
	do(t, ctx, "open the Pipelines tab", chromedp.Navigate(w.url+"/"+w.repo))
	waitText(t, ctx, 30*time.Second, fmt.Sprintf("re-run of #%d", fail.Pipeline))
	do(t, ctx, "press Re-run failed on the first pipeline",
		chromedp.Click(chromedp.CSS(fmt.Sprintf("#p%d form.rerun button", fail.Pipeline))))
	waitText(t, ctx, 30*time.Second, fmt.Sprintf("re-ran 1 run of pipeline #%d as pipeline #", fail.Pipeline))
	third := w.latestPipeline()
	if rs := w.runs(third); len(rs) != 1 || rs[0].Workflow != "fail" {
		t.Fatalf("Re-run failed made pipeline %d with %+v, want the failing run only", third, rs)
	}
	w.waitFinal(w.runs(third)[0].ID, 60*time.Second)
	do(t, ctx, "reload the Pipelines tab", chromedp.Navigate(w.url+"/"+w.repo))
	waitText(t, ctx, 30*time.Second, fmt.Sprintf("#%d", third))
	screenshots(t, ctx, "pipelines-rerun")
}

func TestBrowser_PipelinesTabFiltersByBranchStateAndWorkflowAndLinksACommitToItsPipelines(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, 10*time.Second)
	w.startRunner(w.registerRunner("r1"))
	first := w.push(passAndFail(), 2)
	w.commit(map[string]string{".knotless/workflows/fail.yml": ""})
	w.git("push", "-q", w.url+"/"+w.repo+".git", "HEAD:refs/heads/dev")
	var dev []api.Run
	testwait.Until(t, 15*time.Second, "the dev branch's pipeline", func() (bool, string) {
		dev = w.runs(first[0].Pipeline + 1)
		return len(dev) == 1, fmt.Sprint(len(dev))
	})
	for _, r := range append(first, dev...) {
		w.waitFinal(r.ID, 60*time.Second)
	}
	pipelines := func() []string {
		ids, err := tryEval[[]string](ctx, `Array.from(document.querySelectorAll('li.pipeline')).map(e => e.id)`)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	p1, p2 := fmt.Sprintf("p%d", first[0].Pipeline), fmt.Sprintf("p%d", dev[0].Pipeline)
	signIn(t, ctx, w.url, w.token)
	do(t, ctx, "open the Pipelines tab", chromedp.Navigate(w.url+"/"+w.repo))
	waitText(t, ctx, 30*time.Second, "Filter")
	do(t, ctx, "filter by state failed",
		chromedp.SetValue(chromedp.CSS(`form.filters select[name=state]`), "failed"),
		chromedp.Click(chromedp.CSS(`form.filters button`)))
	testwait.Until(t, 30*time.Second, "only the failed run's pipeline", func() (bool, string) {
		return strings.Join(pipelines(), ",") == p1 && strings.Contains(currentPath(ctx), "state=failed"), currentPath(ctx)
	})
	if runs := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('ul.runs a')).map(e => e.textContent.trim())`); len(runs) != 1 || !strings.Contains(runs[0], "fail") {
		t.Errorf("the filtered pipeline shows the runs %q, want only the failed one", runs)
	}
	screenshots(t, ctx, "pipelines-filtered")
	do(t, ctx, "filter by branch dev",
		chromedp.Navigate(w.url+"/"+w.repo),
		chromedp.WaitVisible(chromedp.CSS(`form.filters input[name=branch]`)),
		chromedp.SendKeys(chromedp.CSS(`form.filters input[name=branch]`), "dev"),
		chromedp.Click(chromedp.CSS(`form.filters button`)))
	testwait.Until(t, 30*time.Second, "only the dev branch's pipeline", func() (bool, string) {
		return strings.Join(pipelines(), ",") == p2, currentPath(ctx)
	})
	do(t, ctx, "filter by workflow pass", chromedp.Navigate(w.url+"/"+w.repo+"?workflow=pass"))
	testwait.Until(t, 30*time.Second, "both pipelines, each with its pass run", func() (bool, string) {
		return strings.Join(pipelines(), ",") == p2+","+p1, currentPath(ctx)
	})
	// The commit of the first pipeline links to its pipelines.
	do(t, ctx, "open the first pipeline's commit",
		chromedp.Navigate(w.url+"/"+w.repo),
		chromedp.WaitVisible(chromedp.CSS("#"+p1+" a.sha")),
		chromedp.Click(chromedp.CSS("#"+p1+" a.sha")))
	testwait.Until(t, 30*time.Second, "the commit's pipelines", func() (bool, string) {
		return strings.Contains(currentPath(ctx), "commit="+first[0].SHA) && strings.Join(pipelines(), ",") == p1, currentPath(ctx)
	})
	waitText(t, ctx, 5*time.Second, "Pipelines of commit "+first[0].SHA[:10])
	// A run's page links its commit there too.
	openRun(t, ctx, w, dev[0].ID)
	if href := eval[string](t, ctx, `document.querySelector('a[href*="?commit="]').getAttribute('href')`); href != "/"+w.repo+"?commit="+dev[0].SHA {
		t.Errorf("the run page's commit links to %q", href)
	}
}

func TestBrowser_LineTimesShowWhenTheRunnerSawEachLine(t *testing.T) {
	ctx, w, run := openSucceededRun(t, "echo first\nsleep 1.5\necho second")
	if shown := eval[bool](t, ctx, `document.querySelector('#step-1 .l .ts').offsetParent !== null`); shown {
		t.Fatal("line times show before the Times box is ticked")
	}
	do(t, ctx, "tick Times", chromedp.Click(chromedp.CSS("#show-times")))
	type lineTime struct {
		Text, Time string
		MS         string
	}
	lines := eval[[]lineTime](t, ctx, `Array.from(document.querySelectorAll('#step-1 .l')).map(l => ({text: l.querySelector('.t').textContent,
		time: l.querySelector('.ts').offsetParent === null ? "hidden" : l.querySelector('.ts').textContent, ms: l.querySelector('.ts').dataset.ms || ""}))`)
	if len(lines) != 2 || lines[0].Text != "first" || lines[1].Text != "second" {
		t.Fatalf("lines %+v", lines)
	}
	clock := regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3}$`)
	var ms [2]int64
	for i, l := range lines {
		if !clock.MatchString(l.Time) {
			t.Fatalf("line %q shows the time %q, want HH:MM:SS.mmm", l.Text, l.Time)
		}
		ms[i], _ = strconv.ParseInt(l.MS, 10, 64)
	}
	started := w.run(run.ID).Steps[1].StartedAt
	if d := time.Duration(ms[1]-ms[0]) * time.Millisecond; d < 1400*time.Millisecond || d > 30*time.Second {
		t.Errorf("second came %s after first, want the step's 1.5 s sleep between them", d)
	}
	if started == nil || time.UnixMilli(ms[0]).Before(started.Add(-time.Second)) || time.UnixMilli(ms[0]).After(started.Add(10*time.Second)) {
		t.Errorf("first line at %s, the step started at %v", time.UnixMilli(ms[0]).UTC(), started)
	}
	// The choice is kept.
	do(t, ctx, "reload", chromedp.Reload())
	testwait.Until(t, 30*time.Second, "times on after a reload", func() (bool, string) {
		on, err := tryEval[bool](ctx, `document.getElementById('show-times').checked && document.querySelectorAll('#step-1 .l .ts').length === 2 &&
			document.querySelector('#step-1 .l .ts').offsetParent !== null`)
		return on, fmt.Sprint(err)
	})
	assertEveryLineTimed(t, ctx)
	screenshots(t, ctx, "run-times")
}

func TestBrowser_RunnerRestartIsAMarkerLineInTheStepLog(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, 30*time.Second)
	rid := w.registerRunner("r1")
	first := w.startRunner(rid)
	run := w.pushOne(gatedWorkflow("echo before the restart\ntouch \"$GATE/printed-$KNOTLESS_RUN\"\n" + waitGateScript("go") + "\necho after the restart"))
	w.waitGate(run.ID, fmt.Sprintf("printed-%d", run.ID), 60*time.Second)
	// The marker stands where the new process goes on from the step's last
	// checkpoint; a step taken over from its first byte is made again whole
	// and has none (TestExecute_TakeoverWithoutCheckpointDoesNotRepeatTheLogsStart).
	// So the kill waits until the server holds the first line: the runner
	// shipped it, so it had checkpointed past it.
	testwait.Until(t, 30*time.Second, "the first line on the server", func() (bool, string) {
		l := w.stepLog(run.ID, 1)
		return strings.Contains(l, "before the restart\n"), fmt.Sprintf("%q", l)
	})
	first.signal(t, syscall.SIGKILL)
	first.wait(t, 10*time.Second)
	second := w.startRunner(rid)
	testwait.Until(t, 30*time.Second, "the new runner to take the run over", func() (bool, string) {
		return strings.Contains(second.output(), "taking over a run"), ""
	})
	w.openRunGate("go", run.ID)
	if got := w.waitFinal(run.ID, 60*time.Second); got.State != api.StateSucceeded {
		t.Fatalf("%s\n%s", describe(got), second.output())
	}
	signIn(t, ctx, w.url, w.token)
	openRun(t, ctx, w, run.ID)
	do(t, ctx, "tick Times", chromedp.Click(chromedp.CSS("#show-times")))
	lines := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#step-1 .l .t')).map(e => e.textContent)`)
	marker := regexp.MustCompile(`^\[knotless: the runner restarted: knotless-run \S+ \(process \d+\) took this step over at \S+; its output goes on below\]$`)
	if len(lines) != 3 || lines[0] != "before the restart" || !marker.MatchString(lines[1]) || lines[2] != "after the restart" {
		t.Fatalf("step 1's lines: %q, want before, the restart marker, after", lines)
	}
	assertEveryLineTimed(t, ctx) // also those the earlier process shipped
	screenshots(t, ctx, "run-restart")
}

func TestBrowser_RunnersTabShowsTheRunnersRealBuildAndCapacity(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, 10*time.Second)
	w.startRunner(w.registerRunner("r1"), "--capacity", "2")
	run := w.pushOne(gatedWorkflow("echo holding\n" + waitGateScript("go")))
	w.waitRun(run.ID, 60*time.Second, "running", func(r api.Run) bool { return r.State == api.StateRunning })
	f, err := os.Open(runnerBin())
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	io.Copy(h, f)
	f.Close()
	digest := hex.EncodeToString(h.Sum(nil))
	signIn(t, ctx, w.url, w.token)
	do(t, ctx, "open the Runners tab", chromedp.Navigate(w.url+"/"+w.repo+"/-/runners"))
	waitText(t, ctx, 30*time.Second, "online")
	if got := eval[string](t, ctx, `document.querySelector('#runner-r1 code.digest').title`); got != digest {
		t.Fatalf("the Runners tab shows the build %q, knotless-run's SHA-256 is %s", got, digest)
	}
	held := eval[string](t, ctx, `document.querySelector('#runner-r1 td.held').innerText`)
	if !strings.Contains(held, "1 of 2") || !strings.Contains(held, fmt.Sprintf("#%d web running", run.ID)) {
		t.Errorf("runs held %q, want 1 of 2 and run %d", held, run.ID)
	}
	screenshots(t, ctx, "runners-held")
	w.openRunGate("go", run.ID)
	w.waitFinal(run.ID, 60*time.Second)
}

// hiddenRunes are every character the pages must show escaped: the
// categories Cf, Zl and Zp (controls are shown as pictures or escapes
// already), by Go's tables.
func hiddenRunes() []rune {
	var out []rune
	rangetable.Visit(rangetable.Merge(unicode.Cf, unicode.Zl, unicode.Zp), func(r rune) { out = append(out, r) })
	return out
}

func TestBrowser_HiddenCharactersInALogAndACommitMessageAreShownEscaped(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, 10*time.Second)
	w.startRunner(w.registerRunner("r1"))
	runes := hiddenRunes()
	var data strings.Builder
	for _, r := range runes {
		fmt.Fprintf(&data, "%U a%cb\n", r, r)
	}
	w.commit(map[string]string{"hidden.txt": data.String(), ".knotless/workflows/web.yml": workflowFile("web", "cat hidden.txt")})
	w.git("commit", "-q", "--allow-empty", "-m", "fix \u202Elaunch\u202C now")
	before := w.latestPipeline()
	w.git("push", "-q", w.url+"/"+w.repo+".git", "HEAD:refs/heads/main")
	var run api.Run
	testwait.Until(t, 15*time.Second, "the push's pipeline", func() (bool, string) {
		p := w.latestPipeline()
		if p > before {
			run = w.runs(p)[0]
		}
		return p > before, ""
	})
	if got := w.waitFinal(run.ID, 60*time.Second); got.State != api.StateSucceeded {
		t.Fatal(describe(got))
	}
	signIn(t, ctx, w.url, w.token)
	openRun(t, ctx, w, run.ID)
	lines := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('#step-1 .l .t')).map(e => e.textContent)`)
	if len(lines) != len(runes) {
		t.Fatalf("%d lines shown, want %d", len(lines), len(runes))
	}
	for i, r := range runes {
		if want := fmt.Sprintf("%U a%sb", r, api.EscapeRune(r)); lines[i] != want {
			t.Errorf("line %d: %q, want %q", i+1, lines[i], want)
		}
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#step-1 .t .esc').length`); n != len(runes) {
		t.Errorf("%d escapes marked in the log, want %d", n, len(runes))
	}
	screenshots(t, ctx, "run-escaped")
	do(t, ctx, "open the Pipelines tab", chromedp.Navigate(w.url+"/"+w.repo))
	waitText(t, ctx, 30*time.Second, `fix \u202elaunch\u202c now`)
	if text := eval[string](t, ctx, `document.body.innerText`); strings.ContainsAny(text, "\u202E\u202C") {
		t.Error("the Pipelines tab shows the commit message's characters themselves")
	}
}

// TestBrowser_FinishedLongLogIsPaintedFromTheTopAtANormalWindowSize pins
// what was found of a report that a finished run's long log "came out
// blank at the top" in headless Chromium: the page is whole and painted
// (its top, its middle and its end, each in the window at 1280x900); a
// finished run now opens at its top instead of following its log to the
// end; and a full-page capture of such a page is Chromium's to refuse
// ("Page is too large": about 800,000 px), which the screenshots helper
// handles by capturing the window.
func TestBrowser_FinishedLongLogIsPaintedFromTheTopAtANormalWindowSize(t *testing.T) {
	ctx, _, _ := openSucceededRun(t, "seq 1 60000")
	if y := eval[float64](t, ctx, `window.scrollY`); y != 0 {
		t.Errorf("a finished run's page opened scrolled to %.0f px, want its top", y)
	}
	if tall := eval[float64](t, ctx, `document.documentElement.scrollHeight`); tall < 100000 {
		t.Fatalf("the page is %.0f px tall; the test wants a page far taller than a capture", tall)
	}
	for _, at := range []struct{ where, js string }{
		{"top", `0`},
		{"middle", `document.documentElement.scrollHeight / 2`},
		{"end", `document.documentElement.scrollHeight`},
	} {
		eval[bool](t, ctx, `window.scrollTo(0, `+at.js+`), true`)
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		shot, err := chromedp.Run(sctx, chromedp.CaptureScreenshot())
		cancel()
		if err != nil {
			t.Fatalf("capture the window at the page's %s: %v", at.where, err)
		}
		if blank := blankTop(t, shot); blank > 120 {
			t.Errorf("the window at the page's %s is blank for its first %d px", at.where, blank)
		}
		if in := eval[bool](t, ctx, `(function () { var el = document.elementFromPoint(400, 450); return !!el && !!el.closest('main') })()`); !in {
			t.Errorf("the window's middle at the page's %s is not the page's content", at.where)
		}
	}
	eval[bool](t, ctx, `window.scrollTo(0, 0), true`)
	screenshots(t, ctx, "run-long-log")
}

// blankTop decodes a PNG capture and counts the rows at its top that are
// one colour edge to edge.
func blankTop(t *testing.T, shot []byte) int {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("decode capture: %v", err)
	}
	b := img.Bounds()
	rows := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		if !uniformRow(img, y) {
			break
		}
		rows++
	}
	return rows
}

func uniformRow(img image.Image, y int) bool {
	b := img.Bounds()
	r0, g0, b0, _ := img.At(b.Min.X, y).RGBA()
	for x := b.Min.X; x < b.Max.X; x += 3 {
		r, g, bb, _ := img.At(x, y).RGBA()
		if r != r0 || g != g0 || bb != b0 {
			return false
		}
	}
	return true
}
