package e2e

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testwait"
)

// minutely is a workflow only a schedule starts, every minute, whose step
// says the event it ran for and when.
const minutely = `on:
  schedule:
    - cron: "* * * * *"
steps:
  - name: say
    run: echo "event=$KNOTLESS_EVENT date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
`

// minuteLayout is how the server and the CLI write a due time.
const minuteLayout = "2006-01-02 15:04 UTC"

var (
	// nextRunSaid is the push's line about the schedule's next time.
	nextRunSaid = regexp.MustCompile(`schedule "\* \* \* \* \*" \(UTC\): next run (\d{4}-\d\d-\d\d \d\d:\d\d UTC) on main`)
	// dueNote is the due time in a scheduled pipeline's notes.
	dueNote = regexp.MustCompile(`, due (\d{4}-\d\d-\d\d \d\d:\d\d UTC)\.`)
	// listedNext and listedLast are knotless schedule list's NEXT and LAST.
	listedNext = regexp.MustCompile(`(\d{4}-\d\d-\d\d \d\d:\d\d UTC) \((in \d+s|due now)\)`)
	listedLast = regexp.MustCompile(`(\d{4}-\d\d-\d\d \d\d:\d\d UTC), pipeline (\d+)`)
)

// A schedule due every minute on two replicas (PostgreSQL, one data
// directory, --schedule-min-interval 1m) and a real runner: each minute
// that passes while a replica is up starts exactly one pipeline, also
// across replica A's SIGKILL and restart between two minutes; with both
// replicas killed over two minutes, the one started again runs only the
// latest of them, once, and its notes say one earlier time passed; the
// replica started after it runs nothing again. Every run succeeded, its
// log says event=schedule, and knotless schedule list through either
// replica shows the next minute and the latest pipeline. Pins: a due
// time two replicas both fire (a fire that is not a compare-and-set), a
// time lost with a restart, a burst of the missed times.
func TestSchedules_EveryMinuteRunsOncePerMinuteOnTwoReplicasAcrossRestartsAndTheLatestMissedMinuteOnce(t *testing.T) {
	t.Parallel() // mostly waiting for minute boundaries
	w, rs := newReplicaWorld(t, 2, 30*time.Second, "--schedule-min-interval", "1m")
	w.startRunner(w.registerRunner("r1"))

	// The push says the next time: the next minute boundary.
	w.commit(map[string]string{".knotless/workflows/minutely.yml": minutely})
	pushedAt := time.Now()
	out := w.git("push", w.url+"/"+w.repo+".git", "HEAD:refs/heads/main")
	m := nextRunSaid.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the push does not say the schedule's next run:\n%s", out)
	}
	m1 := parseMinute(t, m[1])
	if !m1.After(pushedAt.Add(-time.Second)) || m1.After(pushedAt.Add(61*time.Second)) {
		t.Fatalf("the push says the next run is %s, pushed at %s: want the next minute boundary", m[1], pushedAt.UTC().Format(time.RFC3339))
	}
	t.Logf("pushed at %s; first due %s", pushedAt.UTC().Format(time.TimeOnly), m[1])

	// The first minute, both up; then replica A is killed and started again
	// before the second.
	w.waitFinal(waitScheduled(t, w, m1, 100*time.Second).ID, 60*time.Second)
	rs.kill(0)
	rs.start(0)
	t.Logf("%s killed and started again by %s", rs.name(0), time.Now().UTC().Format(time.TimeOnly))
	m2 := m1.Add(time.Minute)
	w.waitFinal(waitScheduled(t, w, m2, 90*time.Second).ID, 60*time.Second)

	// Both killed over two minute boundaries (their runs ended first, so
	// no lease runs out meanwhile), then B alone started again.
	lastUp := time.Now().UTC().Truncate(time.Minute)
	waitScheduled(t, w, lastUp, 10*time.Second)
	rs.kill(0)
	rs.kill(1)
	if now := time.Now(); !now.UTC().Truncate(time.Minute).Equal(lastUp) {
		t.Fatalf("a minute boundary passed while the replicas were being killed (%s): the missed minutes are not known", now.UTC().Format(time.TimeOnly))
	}
	missed, latest := lastUp.Add(time.Minute), lastUp.Add(2*time.Minute)
	t.Logf("both replicas killed at %s; %s and %s pass while they are down", time.Now().UTC().Format(time.TimeOnly),
		missed.UTC().Format(time.TimeOnly), latest.UTC().Format(time.TimeOnly))
	testwait.Until(t, 3*time.Minute, "two minute boundaries to pass with both replicas down", func() (bool, string) {
		return time.Now().After(latest.Add(time.Second)), time.Now().UTC().Format(time.TimeOnly)
	})
	rs.start(1)
	back := waitScheduled(t, w, latest, 30*time.Second)
	if notes := strings.Join(back.PipelineNotes, "\n"); !strings.Contains(notes, "1 earlier time passed while no server could start it; only the latest runs.") {
		t.Errorf("the notes of the run after the downtime do not say one earlier time passed:\n%s", notes)
	}
	rs.start(0)

	// The CLI through each replica, then every scheduled pipeline so far.
	lists := []string{listedSchedule(t, rs, 0), listedSchedule(t, rs, 1)}
	byDue := scheduledPipelines(t, w)
	for _, due := range []time.Time{m1, m2, lastUp, latest} {
		if len(byDue[due]) == 0 {
			t.Errorf("no pipeline ran for %s (a replica was up, or it is the latest missed time)", due.UTC().Format(minuteLayout))
		}
	}
	if ps := byDue[missed]; len(ps) != 0 {
		t.Errorf("%s, passed with both replicas down before a later missed time, started pipelines %v; want none (only the latest runs)", missed.UTC().Format(minuteLayout), ps)
	}
	for due, ps := range byDue {
		if len(ps) != 1 {
			t.Errorf("%s started %d pipelines %v, want exactly 1", due.UTC().Format(minuteLayout), len(ps), ps)
		}
	}
	for _, list := range lists {
		last := listedLast.FindStringSubmatch(list)
		id, _ := strconv.ParseInt(last[2], 10, 64)
		if ps := byDue[parseMinute(t, last[1])]; len(ps) != 1 || ps[0] != id {
			t.Errorf("knotless schedule list names pipeline %d for %s; the pipelines of that time are %v", id, last[1], ps)
		}
	}
	checkScheduledRuns(t, w)
}

// waitScheduled waits up to d for a run of the pipeline the schedule
// started for due (its notes say "due HH:MM") and returns it.
func waitScheduled(t *testing.T, w *world, due time.Time, d time.Duration) api.Run {
	t.Helper()
	want := due.UTC().Format(minuteLayout)
	var found api.Run
	testwait.Until(t, d, "a pipeline the schedule started for "+want, func() (bool, string) {
		runs, err := w.listRuns(t.Context(), 0)
		if err != nil {
			return false, err.Error()
		}
		for _, r := range runs {
			if r.Event == api.EventSchedule && strings.Contains(strings.Join(r.PipelineNotes, "\n"), ", due "+want+".") {
				found = r
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d runs, none for %s", len(runs), want)
	})
	t.Logf("pipeline %d for %s", found.Pipeline, want)
	return found
}

// scheduledPipelines maps each due time of the repository's scheduled
// pipelines to those pipelines' ids.
func scheduledPipelines(t *testing.T, w *world) map[time.Time][]int64 {
	t.Helper()
	seen := map[int64]bool{}
	byDue := map[time.Time][]int64{}
	for _, r := range w.runs(0) {
		if r.Event != api.EventSchedule || seen[r.Pipeline] {
			continue
		}
		seen[r.Pipeline] = true
		m := dueNote.FindStringSubmatch(strings.Join(r.PipelineNotes, "\n"))
		if m == nil {
			t.Fatalf("scheduled pipeline %d's notes say no due time: %q", r.Pipeline, r.PipelineNotes)
		}
		due := parseMinute(t, m[1])
		byDue[due] = append(byDue[due], r.Pipeline)
	}
	for _, ps := range byDue {
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	}
	return byDue
}

// listedSchedule runs knotless schedule list through replica i, away
// from a minute boundary (so no due time is being fired), and checks its
// one schedule: every minute, UTC, on main, next time a future minute one
// after the last, and a last pipeline. It returns the output.
func listedSchedule(t *testing.T, rs *replicas, i int) string {
	t.Helper()
	testwait.Until(t, 10*time.Second, "a time 3 to 55 s into a minute", func() (bool, string) {
		s := time.Now().Second()
		return s >= 3 && s <= 55, fmt.Sprintf("second %d", s)
	})
	before := time.Now()
	out := rs.cliOK(i, "schedule", "list", rs.w.repo)
	next, last := listedNext.FindStringSubmatch(out), listedLast.FindStringSubmatch(out)
	if !strings.Contains(out, "minutely.yml") || !strings.Contains(out, "* * * * * (UTC)") || next == nil || last == nil {
		t.Fatalf("knotless schedule list through %s shows no next time and last pipeline:\n%s", rs.name(i), out)
	}
	n, l := parseMinute(t, next[1]), parseMinute(t, last[1])
	if !n.After(before) || !n.Equal(l.Add(time.Minute)) {
		t.Errorf("knotless schedule list through %s at %s: next %s, last %s; want the next minute, one after the last:\n%s",
			rs.name(i), before.UTC().Format(time.TimeOnly), next[1], last[1], out)
	}
	return out
}

// checkScheduledRuns waits for every scheduled run to end and checks it
// succeeded, was started by the schedule on main, and its log says
// event=schedule.
func checkScheduledRuns(t *testing.T, w *world) {
	t.Helper()
	for _, r := range w.runs(0) {
		if r.Event != api.EventSchedule {
			t.Errorf("%s has event %q, want only scheduled runs", describe(r), r.Event)
			continue
		}
		r = w.waitFinal(r.ID, 60*time.Second)
		log := w.stepLog(r.ID, 1)
		if r.State != api.StateSucceeded || r.Actor != api.ScheduleActor || r.Ref != "refs/heads/main" || !strings.Contains(log, "event=schedule date=") {
			t.Errorf("scheduled %s: actor %q, ref %q, log %q", describe(r), r.Actor, r.Ref, log)
		}
	}
}

// parseMinute parses a due time as the server and the CLI write it.
func parseMinute(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(minuteLayout, s)
	if err != nil {
		t.Fatalf("due time %q: %v", s, err)
	}
	return at
}
