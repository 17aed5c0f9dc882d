package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testwait"
)

// everyMinute is a workflow that only a schedule starts, every minute,
// and says the event it ran for.
const everyMinute = `on:
  schedule:
    - cron: "* * * * *"
steps:
  - name: say
    run: echo "ran for event=$KNOTLESS_EVENT"
`

// A server that allows a schedule every minute (--schedule-min-interval
// 1m) and a pushed workflow due every minute: the Schedules tab shows the
// next due time (a minute boundary just ahead, as a <time>) and knotless
// schedule list the same time; pausing with the CLI shows it paused on the
// tab; its Resume button resumes it; then the schedule fires through the
// runner, and the Pipelines tab marks that pipeline "scheduled" and the
// tab names it as the latest. Pins: a next time the CLI and the web
// disagree on, a pause the tab does not show, a scheduled pipeline shown
// as a push.
func TestBrowser_SchedulesTabShowsTheNextTimeAPauseAndTheScheduledPipeline(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, 10*time.Second, "--schedule-min-interval", "1m")
	w.startRunner(w.registerRunner("r1"))
	// Pushed early in a minute, so the tab, the list and the pause all
	// happen before its first due time.
	testwait.Until(t, 40*time.Second, "the first 30 s of a minute", func() (bool, string) {
		s := time.Now().Second()
		return s < 30, fmt.Sprintf("second %d", s)
	})
	w.commit(map[string]string{".knotless/workflows/minutely.yml": everyMinute})
	w.git("push", "-q", w.url+"/"+w.repo+".git", "HEAD:refs/heads/main")

	signIn(t, ctx, w.url, w.token)
	do(t, ctx, "open the Schedules tab", chromedp.Navigate(w.url+"/"+w.repo+"/-/schedules"))
	waitText(t, ctx, 15*time.Second, "minutely.yml")
	stamp := eval[string](t, ctx, `(document.querySelector('#schedules time.next-at') || {getAttribute: () => ''}).getAttribute('datetime')`)
	next, err := time.Parse(time.RFC3339, stamp)
	if err != nil {
		t.Fatalf("the tab's next due time %q: %v", stamp, err)
	}
	if next.Second() != 0 || !next.After(time.Now().Add(-2*time.Second)) || next.After(time.Now().Add(61*time.Second)) {
		t.Errorf("next due time %s: want the next minute boundary after now (%s)", next.Format(time.RFC3339), time.Now().UTC().Format(time.RFC3339))
	}
	minute := next.UTC().Format("2006-01-02 15:04 UTC")
	waitText(t, ctx, 5*time.Second, minute)
	screenshots(t, ctx, "schedules")
	list := w.cliOK("", "schedule", "list", w.repo)
	if !strings.Contains(list, "minutely.yml") || !strings.Contains(list, "* * * * * (UTC)") || !strings.Contains(list, minute) {
		t.Fatalf("knotless schedule list does not show the tab's next time %s:\n%s", minute, list)
	}
	id := strings.Fields(strings.Split(list, "\n")[1])[0]

	if out := w.cliOK("", "schedule", "pause", id, "--repo", w.repo); !strings.Contains(out, "paused by admin") {
		t.Errorf("knotless schedule pause printed:\n%s", out)
	}
	do(t, ctx, "reload the Schedules tab", chromedp.Navigate(w.url+"/"+w.repo+"/-/schedules"))
	waitText(t, ctx, 15*time.Second, "paused by admin since")
	if n := eval[int](t, ctx, `document.querySelectorAll('#schedules time.next-at').length`); n != 0 {
		t.Errorf("the paused schedule shows %d next times, want none", n)
	}
	screenshots(t, ctx, "schedules-paused")
	do(t, ctx, "press Resume", chromedp.Click(chromedp.CSS("#schedule-"+id+" form button")))
	waitText(t, ctx, 15*time.Second, "Resumed schedule "+id)
	if out := w.cliOK("", "schedule", "list", w.repo); strings.Contains(out, "paused") {
		t.Errorf("knotless schedule list after Resume:\n%s", out)
	}

	var run api.Run
	testwait.Until(t, 100*time.Second, "a run the schedule started", func() (bool, string) {
		for _, r := range w.runs(0) {
			if r.Event == api.EventSchedule {
				run = r
				return true, ""
			}
		}
		return false, w.runSummary()
	})
	if run.Actor != api.ScheduleActor {
		t.Errorf("the scheduled run's actor is %q, want %q", run.Actor, api.ScheduleActor)
	}
	run = w.waitFinal(run.ID, 60*time.Second)
	if log := w.stepLog(run.ID, 1); run.State != api.StateSucceeded || !strings.Contains(log, "ran for event=schedule") {
		t.Errorf("the scheduled run: %s, log %q", describe(run), log)
	}
	do(t, ctx, "open the Pipelines tab", chromedp.Navigate(w.url+"/"+w.repo))
	waitText(t, ctx, 15*time.Second, "scheduled")
	sel := fmt.Sprintf("#p%d .event .badge.scheduled", run.Pipeline)
	if n := eval[int](t, ctx, fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)); n != 1 {
		t.Errorf("pipeline %d is not marked scheduled (%s)", run.Pipeline, sel)
	}
	if ev := eval[string](t, ctx, fmt.Sprintf(`document.querySelector('#p%d .event').innerText`, run.Pipeline)); strings.Contains(ev, "by schedule") {
		t.Errorf("the scheduled pipeline's event reads %q", ev)
	}
	screenshots(t, ctx, "pipelines-scheduled")
	do(t, ctx, "open the Schedules tab", chromedp.Navigate(w.url+"/"+w.repo+"/-/schedules"))
	waitText(t, ctx, 15*time.Second, ", pipeline #")
}
