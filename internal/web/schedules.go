package web

import (
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/units"
)

// The Schedules tab (issue 38): a repository's schedules, when each runs
// next, what stops one, and Pause/Resume for who may change them.

// schedulesView is what schedules.html shows.
type schedulesView struct {
	api.ScheduleList
	// CanPause: the viewer may pause and resume (the repository's owner
	// or an admin, as dev.knotless.repo.pauseSchedule allows).
	CanPause bool
	// MinInterval is the server's shortest time between two runs of a
	// schedule, in words ("5m"); "" when it has none.
	MinInterval string
	// Problems are the schedules with a Problem, shown above the table.
	Problems []api.Schedule
}

// schedules shows a repository's Schedules tab.
func (h *Handler) schedules(w http.ResponseWriter, r *http.Request, s *Session) {
	repo := repoOf(r)
	if api.CheckRepo(repo) != nil {
		h.errorPage(w, r, s, http.StatusNotFound, "No such page.")
		return
	}
	l, err := h.b.Schedules(r.Context(), s.Viewer, repo)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	view := schedulesView{ScheduleList: l, CanPause: s.Viewer.Admin || r.PathValue("owner") == s.Viewer.Handle}
	if l.MinIntervalSeconds > 0 {
		view.MinInterval = units.FormatDuration(time.Duration(l.MinIntervalSeconds) * time.Second)
	}
	for _, sc := range l.Schedules {
		if sc.Problem != "" && !sc.Paused {
			view.Problems = append(view.Problems, sc)
		}
	}
	h.render(w, http.StatusOK, "schedules.html", page{Title: "Schedules · " + repo, Session: s, Repo: repo, Tab: "schedules",
		Flash: r.URL.Query().Get("done"), Data: view})
}

// pauseSchedule pauses (form paused=1) or resumes (paused=0) schedule
// form id of the repository, then shows the tab again.
func (h *Handler) pauseSchedule(w http.ResponseWriter, r *http.Request, s *Session) {
	repo := repoOf(r)
	id, err := strconv.ParseInt(r.PostFormValue("id"), 10, 64)
	if api.CheckRepo(repo) != nil || err != nil || id <= 0 {
		h.errorPage(w, r, s, http.StatusNotFound, "No such page.")
		return
	}
	paused := r.PostFormValue("paused") == "1"
	sc, err := h.b.PauseSchedule(r.Context(), s.Viewer, api.PauseScheduleInput{Repo: repo, ID: id, Paused: paused})
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	done := fmt.Sprintf("Paused schedule %d (%s): its times do not run until it is resumed.", id, path.Base(sc.Workflow))
	if !paused {
		done = fmt.Sprintf("Resumed schedule %d (%s)", id, path.Base(sc.Workflow))
		if sc.NextAt != nil {
			done += ": next run " + utcText(*sc.NextAt)
		}
		done += "."
	}
	h.log.Info("schedule paused from the web", "repo", repo, "schedule", id, "paused", paused, "by", s.Viewer.Handle)
	http.Redirect(w, r, "/"+repo+"/-/schedules?done="+urlQuery(done), http.StatusSeeOther)
}

// utcText writes a due time in UTC to the minute, as knotless schedule
// list does ("2026-12-08 03:00 UTC"), with seconds when it has any.
func utcText(t time.Time) string {
	t = t.UTC()
	if t.Second() != 0 {
		return t.Format("2006-01-02 15:04:05 UTC")
	}
	return t.Format("2006-01-02 15:04 UTC")
}

// until says how soon t is, coarsely, as age says how long ago: "in 45s",
// "in 12m", "in 3h 12m", "in 2d 4h"; "due now" for a time just passed.
func until(t time.Time) string {
	d := time.Until(t).Round(time.Second)
	switch {
	case d < 5*time.Second:
		return "due now"
	case d < time.Minute:
		return fmt.Sprintf("in %ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("in %dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return strings.TrimSuffix(fmt.Sprintf("in %dh %dm", int(d.Hours()), int(d%time.Hour/time.Minute)), " 0m")
	default:
		return strings.TrimSuffix(fmt.Sprintf("in %dd %dh", int(d.Hours()/24), int(d%(24*time.Hour)/time.Hour)), " 0h")
	}
}
