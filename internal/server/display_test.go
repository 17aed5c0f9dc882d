package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

// TestStartSession_BidiOverrideInVersionIsRefused: what a runner says of
// itself is shown on the Runners tab, so it follows the text rule
// (api.CheckText) at the API: refused with the character named.
func TestStartSession_BidiOverrideInVersionIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	for _, in := range []api.StartSessionInput{
		{Version: "v1\u202E2v", Executor: "shell"},
		{Version: "v1", Executor: "kube", Facts: map[string]string{"pod": "a\u2066b"}},
		{Version: "v1", Executor: "kube", Facts: map[string]string{"po\u200Bd": "x"}},
	} {
		err := r.Client.Procedure(context.Background(), api.MethodStartSession, in, nil)
		var e *api.Error
		if !errorsAs(err, &e) || e.Status != http.StatusBadRequest || !strings.Contains(e.Message, "U+") || strings.ContainsAny(e.Message, "\u202E\u2066\u200B") {
			t.Errorf("startSession %+v: %v, want 400 naming the character", in, err)
		}
	}
}

// TestWeb_RunnersTabShowsKubeNamespacePodCapacityAndDigest pins issue 25
// item 3: the Runners tab shows the runner's real build (its executable's
// SHA-256 beside its version), its capacity against the runs it holds,
// and its executor's facts (a kube runner's namespace and pod).
func TestWeb_RunnersTabShowsKubeNamespacePodCapacityAndDigest(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	digest := strings.Repeat("ab", 32)
	procedure(t, r, api.MethodStartSession, api.StartSessionInput{Version: "v1.2.3", Executor: "kube", Digest: digest, Capacity: 3,
		Facts: map[string]string{"namespace": "ci-jobs", "pod": "knotless-runner-7d9f-x2"}}, nil)
	b := signedIn(t, f.URL, f.token)
	_, page := b.get("/alice/app/-/runners")
	row := page[strings.Index(page, `id="runner-r1"`):]
	row = row[:strings.Index(row, "</tr>")]
	for _, want := range []string{`<td class="executor">kube`, "<dt>namespace</dt><dd>ci-jobs</dd>", "<dt>pod</dt><dd>knotless-runner-7d9f-x2</dd>",
		`<td class="version">v1.2.3`, `title="` + digest + `">` + digest[:12] + "</code>", "1 of 3",
		fmt.Sprintf(`<a href="/-/runs/%d">#%d</a> any`, c.Run.ID, c.Run.ID)} {
		if !strings.Contains(row, want) {
			t.Errorf("runner r1's row lacks %q:\n%s", want, row)
		}
	}
}

// TestWeb_RerunButtonGoesThroughTheAPIsRules pins the re-run buttons:
// shown on a finished run only; a POST without the session's form token is
// refused; an account that may not trigger the repository's runs gets
// 404; the owner's makes a new pipeline naming the old one.
func TestWeb_RerunButtonGoesThroughTheAPIsRules(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	run := queueOne(t, f, "")
	alice := signedIn(t, f.URL, f.token)
	_, page := alice.get(fmt.Sprintf("/-/runs/%d", run.ID))
	if !strings.Contains(page, `<form id="rerun" method="post" action="/-/runs/`+fmt.Sprint(run.ID)+`/rerun" hidden>`) {
		t.Errorf("a queued run's page shows a Re-run button:\n%s", page)
	}
	if code := alice.post(fmt.Sprintf("/-/runs/%d/rerun", run.ID), url.Values{"csrf": {alice.csrf()}}); code != http.StatusConflict {
		t.Errorf("re-run of a queued run: %d, want 409", code)
	}
	if err := f.alice().Procedure(context.Background(), api.MethodCancelRun, api.RunRef{Run: run.ID}, nil); err != nil {
		t.Fatal(err)
	}
	_, page = alice.get(fmt.Sprintf("/-/runs/%d", run.ID))
	if !strings.Contains(page, `<form id="rerun" method="post" action="/-/runs/`+fmt.Sprint(run.ID)+`/rerun">`) {
		t.Errorf("a cancelled run's page has no Re-run button:\n%s", page)
	}
	_, tab := alice.get("/alice/app")
	if !strings.Contains(tab, fmt.Sprintf(`action="/-/pipelines/%d/rerun"`, run.Pipeline)) {
		t.Errorf("the Pipelines tab has no Re-run failed button for pipeline %d", run.Pipeline)
	}
	if code := alice.post(fmt.Sprintf("/-/runs/%d/rerun", run.ID), url.Values{}); code != http.StatusForbidden {
		t.Errorf("re-run without the form token: %d, want 403", code)
	}
	bob := signedIn(t, f.URL, f.CreateAccount(t, "bob"))
	if code := bob.post(fmt.Sprintf("/-/runs/%d/rerun", run.ID), url.Values{"csrf": {bob.csrf()}}); code != http.StatusNotFound {
		t.Errorf("bob's re-run: %d, want 404", code)
	}
	if code := bob.post(fmt.Sprintf("/-/pipelines/%d/rerun", run.Pipeline), url.Values{"csrf": {bob.csrf()}}); code != http.StatusNotFound {
		t.Errorf("bob's re-run of the pipeline: %d, want 404", code)
	}
	if n := len(f.runs(t)); n != 1 {
		t.Fatalf("%d runs after refused re-runs, want 1", n)
	}
	if code := alice.post(fmt.Sprintf("/-/runs/%d/rerun", run.ID), url.Values{"csrf": {alice.csrf()}}); code != http.StatusSeeOther {
		t.Fatalf("alice's re-run: %d, want 303 to the new run", code)
	}
	runs := f.runs(t)
	if len(runs) != 2 || runs[0].State != api.StateQueued || runs[0].PipelineRerunOf != run.Pipeline || runs[0].Actor != "alice" {
		t.Fatalf("runs after the re-run: %+v", runs)
	}
}

// TestWeb_PipelinesTabFiltersByBranchStateWorkflowAndCommit: the filters
// select pipelines (the store pins the query), the page keeps them in the
// next page's link, and a commit links to its pipelines.
func TestWeb_PipelinesTabFiltersByBranchStateWorkflowAndCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, map[string]string{".knotless/workflows/any.yml": "on: {push: {}}\nsteps: [{run: x}]\n"})
	f.push(t, dir, "main")
	servertest.Commit(t, dir, map[string]string{".knotless/workflows/lint.yml": "on: {push: {}}\nsteps: [{run: x}]\nbad: 1\n"}, "second")
	f.push(t, dir, "HEAD:refs/heads/dev")
	sha := strings.TrimSpace(servertest.Git(t, dir, "rev-parse", "HEAD"))
	b := signedIn(t, f.URL, f.token)
	count := func(q string) int {
		code, page := b.get("/alice/app" + q)
		if code != 200 {
			t.Fatalf("GET %s: %d", q, code)
		}
		return strings.Count(page, `<li class="pipeline"`)
	}
	for q, want := range map[string]int{"": 2, "?branch=main": 1, "?branch=dev": 1, "?state=errored": 1, "?workflow=lint": 1,
		"?state=errored&branch=main": 0, "?commit=" + sha: 1, "?state=succeeded": 0} {
		if got := count(q); got != want {
			t.Errorf("pipelines of %q: %d, want %d", q, got, want)
		}
	}
	_, page := b.get("/alice/app")
	if !strings.Contains(page, `href="/alice/app?commit=`+sha+`"`) || !strings.Contains(page, `<option value="dev">`) {
		t.Errorf("the tab has no link to the commit's pipelines or no branch suggestion:\n%s", page)
	}
	if code, _ := b.get("/alice/app?state=bogus"); code != http.StatusBadRequest {
		t.Errorf("an unknown state: %d, want 400", code)
	}
}

// TestWeb_CommitMessageAndBranchWithBidiOverrideAreShownEscaped pins
// issue 25 item 1 on the pages: what arrives another way than a checked
// name (a commit message, a branch) shows its hidden characters as
// escapes, and never as themselves.
func TestWeb_CommitMessageAndBranchWithBidiOverrideAreShownEscaped(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	dir := t.TempDir()
	servertest.Git(t, dir, "init", "-q", "-b", "main")
	servertest.Commit(t, dir, map[string]string{".knotless/workflows/any.yml": "on: {push: {}}\nsteps: [{run: x}]\n"}, "fix \u202Elaunch\u2069 now")
	f.push(t, dir, "HEAD:refs/heads/re\u2067lease")
	b := signedIn(t, f.URL, f.token)
	_, page := b.get("/alice/app")
	for _, want := range []string{`fix <span class="esc" title="U+202E RIGHT-TO-LEFT OVERRIDE">\u202e</span>launch`,
		`re<span class="esc" title="U+2067 RIGHT-TO-LEFT ISOLATE">\u2067</span>lease`} {
		if !strings.Contains(page, want) {
			t.Errorf("the Pipelines tab lacks %q", want)
		}
	}
	if i := strings.IndexAny(page, "\u202E\u2069\u2067"); i >= 0 {
		t.Errorf("the Pipelines tab holds the characters themselves: %q", page[max(i-200, 0):min(i+100, len(page))])
	}
}

// TestAppendLog_LineTimesAreKeptOnceAndServedWithTheLog pins the server
// side of the line times: kept with the bytes they belong to, once (a
// resent chunk does not add them again), malformed ones dropped without
// refusing the bytes, and served to the run page with the log.
func TestAppendLog_LineTimesAreKeptOnceAndServedWithTheLog(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	send := func(off int64, data, times string) {
		t.Helper()
		q := url.Values{"run": {fmt.Sprint(c.Run.ID)}, "step": {"1"}, "offset": {fmt.Sprint(off)}}
		if times != "" {
			q.Set(api.LogTimesParam, times)
		}
		resp, err := r.Client.Do(context.Background(), http.MethodPost, api.MethodAppendLog, q, "application/octet-stream", strings.NewReader(data))
		if err != nil {
			t.Fatalf("append at %d: %v", off, err)
		}
		resp.Body.Close()
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli()
	send(0, "one\ntwo\n", fmt.Sprintf("0:%d,4:%d", t0, t0+1500))
	send(0, "one\ntwo\n", fmt.Sprintf("0:%d,4:%d", t0+99999, t0+99999)) // a resend
	send(8, "three\n", "garbage")
	send(14, "four\n", fmt.Sprintf("14:%d", t0+4000))
	b := signedIn(t, f.URL, f.token)
	code, body := b.get(fmt.Sprintf("/-/runs/%d/log/1?before=19", c.Run.ID))
	var ev struct {
		Text  string
		Times [][2]int64
	}
	if err := json.Unmarshal([]byte(body), &ev); code != 200 || err != nil {
		t.Fatalf("log part: %d %v %s", code, err, body)
	}
	want := fmt.Sprint([][2]int64{{0, t0}, {4, t0 + 1500}, {14, t0 + 4000}})
	if ev.Text != "one\ntwo\nthree\nfour\n" || fmt.Sprint(ev.Times) != want {
		t.Fatalf("log part: %q %v, want the log with times %s", ev.Text, ev.Times, want)
	}
}
