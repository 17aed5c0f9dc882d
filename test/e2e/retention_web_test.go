package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"knotless.dev/knotless/internal/testwait"
)

// A server keeping the newest pipeline of each branch (--keep-pipelines
// 1) removes the older pipeline's run's logs once a newer one ran: its
// page says "Logs expired on DATE" where the log was, knotless run logs
// prints the same, the newer run keeps its log, and the Usage tab shows
// what expired and the rule. Pins: an expired run shown as an empty log
// or a 404.
func TestBrowser_ExpiredRunSaysLogsExpiredAndTheUsageTabShowsIt(t *testing.T) {
	ctx := newBrowser(t)
	w := newWorld(t, 10*time.Second, "--keep-pipelines", "1", "--retention-grace", "1s", "--retention-every", "300ms")
	w.startRunner(w.registerRunner("r1"))
	first := w.pushOne(gatedWorkflow("echo first-pipeline-line"))
	w.waitFinal(first.ID, 60*time.Second)
	second := w.pushOne(gatedWorkflow("echo second-pipeline-line"))
	w.waitFinal(second.ID, 60*time.Second)

	testwait.Until(t, 30*time.Second, "the first run's logs to expire", func() (bool, string) {
		res := w.cli("", "run", "logs", fmt.Sprint(first.ID))
		return res.code == 1 && strings.Contains(res.stderr, fmt.Sprintf("the logs of run %d expired on ", first.ID)), res.stderr
	})
	if out := w.cliOK("", "run", "logs", fmt.Sprint(second.ID)); !strings.Contains(out, "second-pipeline-line") {
		t.Fatalf("the newest pipeline's run lost its log:\n%s", out)
	}
	if out := w.cliOK("", "repo", "usage", w.repo); !strings.Contains(out, "Retention removed the logs and outputs of 1 run") ||
		!strings.Contains(out, "Kept for the newest 1 pipeline of each branch.") {
		t.Fatalf("knotless repo usage:\n%s", out)
	}

	signIn(t, ctx, w.url, w.token)
	do(t, ctx, "open the expired run's page", chromedp.Navigate(fmt.Sprintf("%s/-/runs/%d", w.url, first.ID)))
	waitText(t, ctx, 30*time.Second, "Logs expired on ")
	if n := eval[int](t, ctx, `document.querySelectorAll('a.raw').length`); n != 0 {
		t.Errorf("the expired run's page links %d raw logs, want none", n)
	}
	if lines := eval[int](t, ctx, `document.querySelectorAll('.log .l').length`); lines != 0 {
		t.Errorf("the expired run's page shows %d log lines, want none", lines)
	}
	screenshots(t, ctx, "run-expired")
	do(t, ctx, "open the newer run's page", chromedp.Navigate(fmt.Sprintf("%s/-/runs/%d", w.url, second.ID)))
	waitText(t, ctx, 30*time.Second, "second-pipeline-line")
	do(t, ctx, "open the Usage tab", chromedp.Navigate(w.url+"/"+w.repo+"/-/usage"))
	waitText(t, ctx, 30*time.Second, "Retention removed the logs and outputs of 1 run (")
	waitText(t, ctx, 5*time.Second, "Kept for the newest 1 pipeline of each branch.")
	screenshots(t, ctx, "usage")
}
