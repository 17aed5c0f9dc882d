package web

import (
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
)

// renderPage renders one template as the handler does and returns the HTML.
func renderPage(t *testing.T, name string, p page) string {
	t.Helper()
	var b strings.Builder
	if err := New(Config{}).tmpl.ExecuteTemplate(&b, name, p); err != nil {
		t.Fatalf("render %s: %v", name, err)
	}
	return b.String()
}

// The Schedules tab shows each schedule's next due time as a <time> in
// UTC with how soon, a paused one as paused by whom, a broken one's
// problem above the table and in its row, and Pause/Resume to who may.
// Pins: a problem only in a tooltip, a paused schedule showing a next time.
func TestSchedulesTab_NextTimeProblemAndPausedShown(t *testing.T) {
	next := time.Now().Add(3*time.Hour + 20*time.Minute).Truncate(time.Minute)
	pausedAt := time.Now().Add(-time.Hour)
	l := api.ScheduleList{MinIntervalSeconds: 300, Schedules: []api.Schedule{
		{ID: 1, Workflow: ".knotless/workflows/nightly.yml", Cron: "0 3 * * *", TimeZone: "Europe/Berlin", Branch: "main", NextAt: &next},
		{ID: 2, Workflow: ".knotless/workflows/deps.yml", Cron: "@daily", TimeZone: "UTC", Branch: "main", NextAt: &next,
			Paused: true, PausedBy: "alice", PausedAt: &pausedAt},
		{ID: 3, Workflow: ".knotless/workflows/release.yml", Cron: "30 4 * * 1", TimeZone: "UTC", Branch: "release",
			Problem: "branch release does not exist"},
	}}
	s := &Session{CSRF: "tok", Viewer: Viewer{Handle: "alice"}}
	html := renderPage(t, "schedules.html", page{Title: "Schedules", Session: s, Repo: "alice/app", Tab: "schedules",
		Data: schedulesView{ScheduleList: l, CanPause: true, MinInterval: "5m", Problems: l.Schedules[2:]}})
	row := func(id string) string {
		i := strings.Index(html, `id="schedule-`+id+`"`)
		if i < 0 {
			t.Fatalf("no row for schedule %s:\n%s", id, html)
		}
		j := strings.Index(html[i:], "</tr>")
		return html[i : i+j]
	}
	stamp := next.UTC().Format(time.RFC3339)
	if r := row("1"); !strings.Contains(r, `<time class="next-at" datetime="`+stamp+`"`) || !strings.Contains(r, utcText(next)) ||
		!strings.Contains(r, "in 3h 1") || !strings.Contains(r, ">Pause</button>") {
		t.Errorf("schedule 1's row lacks its next time %s, how soon, or Pause:\n%s", stamp, r)
	}
	if r := row("2"); !strings.Contains(r, "paused</span> by alice since") || strings.Contains(r, "next-at") || !strings.Contains(r, ">Resume</button>") {
		t.Errorf("the paused schedule's row:\n%s", r)
	}
	if r := row("3"); !strings.Contains(r, "Not running: branch release does not exist") {
		t.Errorf("the broken schedule's row lacks its problem:\n%s", r)
	}
	if !strings.Contains(html, `<strong>Schedule 3 (release.yml) does not run:</strong> branch release does not exist`) {
		t.Errorf("no problem above the table:\n%s", html)
	}
	if !strings.Contains(html, `aria-current="page">Schedules</a>`) {
		t.Errorf("the Schedules tab is not marked current")
	}
}

// A pipeline a schedule started is marked "scheduled" on the Pipelines
// tab and its run's page, without "by schedule"; a pushed one still says
// its event and who.
// Pins: "schedule by schedule", a scheduled pipeline looking like a push.
func TestPipelinesTab_ScheduledPipelineIsMarked(t *testing.T) {
	s := &Session{CSRF: "tok", Viewer: Viewer{Handle: "alice"}}
	view := pipelinesView{PipelinePage: PipelinePage{Repo: "alice/app", Pipelines: []Pipeline{
		{ID: 2, Ref: "refs/heads/main", SHA: strings.Repeat("b", 40), Event: api.EventSchedule, Actor: api.ScheduleActor, CreatedAt: time.Now()},
		{ID: 1, Ref: "refs/heads/main", SHA: strings.Repeat("a", 40), Event: "push", Actor: "alice", CreatedAt: time.Now()},
	}}}
	html := renderPage(t, "pipelines.html", page{Title: "Pipelines", Session: s, Repo: "alice/app", Tab: "pipelines", Data: view})
	p2, p1, _ := strings.Cut(html[strings.Index(html, `id="p2"`):], `id="p1"`)
	if !strings.Contains(p2, `<span class="badge scheduled" title="started by a schedule (see the Schedules tab)">scheduled</span>`) || strings.Contains(p2, "by schedule") {
		t.Errorf("the scheduled pipeline:\n%s", p2)
	}
	if !strings.Contains(p1, "push by alice") || strings.Contains(p1, `class="badge scheduled"`) {
		t.Errorf("the pushed pipeline:\n%s", p1)
	}
	run := Run{Run: api.Run{ID: 7, Repo: "alice/app", Pipeline: 2, Ref: "refs/heads/main", Event: api.EventSchedule, Actor: api.ScheduleActor}}
	html = renderPage(t, "run.html", page{Title: "Run 7", Session: s, Repo: "alice/app", Tab: "pipelines", Data: struct {
		Run
		Steps []stepView
		From  string
	}{Run: run}})
	if !strings.Contains(html, `class="badge scheduled"`) || strings.Contains(html, "by schedule") {
		t.Errorf("the run page of a scheduled run does not mark it:\n%s", html)
	}
}
