package web

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/pipegraph"
)

var funcs = template.FuncMap{
	"age":      age,
	"short":    func(sha string) string { return sha[:min(len(sha), 10)] },
	"ref":      shortRef,
	"bytes":    humanBytes,
	"duration": stepDuration,
	"final":    api.IsFinal,
	"stamp":    func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"stampp": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"runDuration": runDuration,
	"label":       pipegraph.Label,
	"join":        strings.Join,
	"inc":         func(i int) int { return i + 1 },
	"vis":         vis,
	"branchParam": func(ref string) string { // the branch filter's value for ref
		if b, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
			return b
		}
		return ref
	},
	"vistext":     api.VisibleText,
	"plain":       func(s string) bool { return api.VisibleText(s) == s }, // s shows as itself
	"shortDigest": func(d string) string { return d[:min(len(d), 12)] },
	"expiredOn":   expiredOn,
	"utc":         utcText,
	"until":       until,
	"base":        path.Base,
	// scheduled: a pipeline's event is a schedule's; actor is who to
	// name after "by" ("" for the schedule's own, which the event says).
	"scheduled": func(event string) bool { return event == api.EventSchedule },
	"actor": func(event, actor string) string {
		if event == api.EventSchedule && actor == api.ScheduleActor {
			return ""
		}
		return actor
	},
}

// vis is s for a page's text: every character api.IsHiddenRune (a
// control, a bidirectional override or isolate, a zero-width or separator
// character) and every byte that is not UTF-8 shown as its escape
// (api.EscapeRune) in a <span class="esc"> titled with the character's
// name, the rest HTML-escaped; so that a commit message, a branch or a
// name from before the rule can never display as something else.
func vis(s string) template.HTML {
	var b strings.Builder
	plain := 0 // start of the text not yet written
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		bad := r == utf8.RuneError && size <= 1
		if !bad && !api.IsHiddenRune(r) {
			i += size
			continue
		}
		b.WriteString(template.HTMLEscapeString(s[plain:i]))
		if bad {
			fmt.Fprintf(&b, `<span class="esc" title="a byte that is not UTF-8">\x%02x</span>`, s[i])
		} else {
			fmt.Fprintf(&b, `<span class="esc" title="%s">%s</span>`, template.HTMLEscapeString(api.RuneName(r)), api.EscapeRune(r))
		}
		i += size
		plain = i
	}
	b.WriteString(template.HTMLEscapeString(s[plain:]))
	return template.HTML(b.String())
}

// age says how long ago t was, coarsely ("3m ago").
func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd ago", int(d.Hours()/24))
	}
}

// shortRef is a ref without refs/heads/ or refs/tags/.
func shortRef(ref string) string {
	for _, p := range []string{"refs/heads/", "refs/tags/"} {
		if s, ok := strings.CutPrefix(ref, p); ok {
			return s
		}
	}
	return ref
}

func humanBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
}

func roundDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// stepDuration is how long a step took (or has taken so far); "" when it
// did not start.
func stepDuration(s Step) string {
	if s.Started == nil {
		return ""
	}
	end := time.Now()
	if s.Ended != nil {
		end = *s.Ended
	}
	return roundDuration(max(end.Sub(*s.Started), 0))
}

func runDuration(r api.Run) string {
	if r.StartedAt == nil {
		return ""
	}
	end := time.Now()
	if r.FinishedAt != nil {
		end = *r.FinishedAt
	}
	return roundDuration(max(end.Sub(*r.StartedAt), 0))
}

func repoOf(r *http.Request) string { return r.PathValue("owner") + "/" + r.PathValue("name") }

// states are the run states the Pipelines tab filters by.
var states = api.RunStates

// pipelinesView is what pipelines.html shows.
type pipelinesView struct {
	PipelinePage
	Query  PipelineQuery
	States []string
	// Filtered: a filter is on; OlderURL is the next page's address,
	// with the filters.
	Filtered bool
	OlderURL string
	Live     bool // the newest page: refreshed in place
}

// pipelineQuery reads the Pipelines tab's filters from the address:
// before, branch, commit (a full commit id), state and workflow.
func pipelineQuery(r *http.Request, limit int) (PipelineQuery, bool) {
	v := r.URL.Query()
	before, _ := strconv.ParseInt(v.Get("before"), 10, 64)
	q := PipelineQuery{Before: max(before, 0), Limit: limit, Branch: strings.TrimSpace(v.Get("branch")),
		Commit: strings.TrimSpace(strings.ToLower(v.Get("commit"))), State: v.Get("state"), Workflow: v.Get("workflow")}
	ok := (q.State == "" || slices.Contains(states, q.State)) && (q.Commit == "" || isCommitID(q.Commit)) &&
		api.CheckText("branch", q.Branch) == nil && api.CheckText("workflow", q.Workflow) == nil
	return q, ok
}

// isCommitID reports whether s is a full SHA-1 or SHA-256 commit id in
// lower-case hex.
func isCommitID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}

// encode is the query string of q's filters, with before.
func (q PipelineQuery) encode(before int64) string {
	v := url.Values{}
	for k, x := range map[string]string{"branch": q.Branch, "commit": q.Commit, "state": q.State, "workflow": q.Workflow} {
		if x != "" {
			v.Set(k, x)
		}
	}
	if before > 0 {
		v.Set("before", strconv.FormatInt(before, 10))
	}
	return v.Encode()
}

func (h *Handler) pipelines(w http.ResponseWriter, r *http.Request, s *Session) {
	repo := repoOf(r)
	if api.CheckRepo(repo) != nil {
		h.errorPage(w, r, s, http.StatusNotFound, "No such page.")
		return
	}
	q, ok := pipelineQuery(r, h.cfg.PipelinesPage)
	if !ok {
		h.errorPage(w, r, s, http.StatusBadRequest, "A filter is not valid: a state is one of "+strings.Join(states, ", ")+
			"; a commit is a full commit id; a branch or workflow is shown text.")
		return
	}
	p, err := h.b.Pipelines(r.Context(), s.Viewer, repo, q)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	view := pipelinesView{PipelinePage: p, Query: q, States: states, Live: q.Before <= 0,
		Filtered: q.Branch != "" || q.Commit != "" || q.State != "" || q.Workflow != ""}
	if p.Older > 0 {
		view.OlderURL = "/" + repo + "?" + q.encode(p.Older)
	}
	h.render(w, http.StatusOK, "pipelines.html", page{Title: "Pipelines · " + repo, Session: s, Repo: repo, Tab: "pipelines",
		Flash: r.URL.Query().Get("done"), Data: view})
}

func (h *Handler) runners(w http.ResponseWriter, r *http.Request, s *Session) {
	repo := repoOf(r)
	if api.CheckRepo(repo) != nil {
		h.errorPage(w, r, s, http.StatusNotFound, "No such page.")
		return
	}
	p, err := h.b.Runners(r.Context(), s.Viewer, repo)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.render(w, http.StatusOK, "runners.html", page{Title: "Runners · " + repo, Session: s, Repo: repo, Tab: "runners",
		Flash: r.URL.Query().Get("done"), Data: p})
}

func (h *Handler) approve(w http.ResponseWriter, r *http.Request, s *Session) {
	repo, name, did := repoOf(r), r.PostFormValue("name"), r.PostFormValue("did")
	if err := h.b.ApproveRunner(r.Context(), s.Viewer, repo, name, did); err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.log.Info("runner approved from the web", "repo", repo, "runner", name, "by", s.Viewer.Handle)
	http.Redirect(w, r, "/"+repo+"/-/runners?done="+urlQuery("approved "+name), http.StatusSeeOther)
}

func (h *Handler) remove(w http.ResponseWriter, r *http.Request, s *Session) {
	repo, name := repoOf(r), r.PostFormValue("name")
	if err := h.b.RemoveRunner(r.Context(), s.Viewer, repo, name); err != nil {
		h.fail(w, r, s, err)
		return
	}
	http.Redirect(w, r, "/"+repo+"/-/runners?done="+urlQuery("removed "+name), http.StatusSeeOther)
}

func urlQuery(s string) string { return strings.ReplaceAll(template.URLQueryEscaper(s), "+", "%20") }

// runID reads the {run} path value; 0 when it is not a positive integer.
func runID(r *http.Request) int64 {
	id, err := strconv.ParseInt(r.PathValue("run"), 10, 64)
	if err != nil || id <= 0 {
		return 0
	}
	return id
}

// stepView is a step's log section on the run page.
type stepView struct {
	Step
	RunID   int64
	Start   int64 // the byte the page's log starts at (a line's start)
	Expired bool  // retention removed the log (Run.Expired)
}

func (h *Handler) runPage(w http.ResponseWriter, r *http.Request, s *Session) {
	id := runID(r)
	if id == 0 {
		h.errorPage(w, r, s, http.StatusNotFound, "No such page.")
		return
	}
	run, err := h.b.Run(r.Context(), s.Viewer, id)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	var steps []stepView
	var from []string
	for _, st := range run.Steps {
		start, err := h.tailStart(r, s, id, st.Index, st.LogSize)
		if err != nil {
			h.fail(w, r, s, err)
			return
		}
		steps = append(steps, stepView{Step: st, RunID: id, Start: start, Expired: run.Expired != nil})
		from = append(from, fmt.Sprintf("%d:%d", st.Index, start))
	}
	h.render(w, http.StatusOK, "run.html", page{Title: fmt.Sprintf("Run %d · %s", id, api.VisibleText(run.Workflow)), Session: s,
		Repo: run.Repo, Tab: "pipelines", Data: struct {
			Run
			Steps []stepView
			From  string
		}{run, steps, strings.Join(from, ",")}})
}

// tailStart is where a log of size bytes is shown from: 0, or the start of
// the first whole line in its last LogTail bytes.
func (h *Handler) tailStart(r *http.Request, s *Session, run int64, step int, size int64) (int64, error) {
	if size <= h.cfg.LogTail {
		return 0, nil
	}
	return h.lineAfter(r, s, run, step, size-h.cfg.LogTail, size)
}

// lineAfter returns the start of the first line that begins at or after
// from (from itself when a line ends just before it), at most end.
func (h *Handler) lineAfter(r *http.Request, s *Session, run int64, step int, from, end int64) (int64, error) {
	if from <= 0 {
		return 0, nil
	}
	for at := from - 1; at < end; at += 4096 {
		b, err := h.b.ReadLog(r.Context(), s.Viewer, run, step, at, min(at+4096, end))
		if err != nil {
			return 0, err
		}
		if i := strings.IndexByte(string(b), '\n'); i >= 0 {
			return at + int64(i) + 1, nil
		}
		if len(b) == 0 {
			break
		}
	}
	return end, nil
}

// rerunRun runs a finished run again (the Re-run button) and shows the
// new run.
func (h *Handler) rerunRun(w http.ResponseWriter, r *http.Request, s *Session) {
	id := runID(r)
	if id == 0 {
		h.errorPage(w, r, s, http.StatusNotFound, "No such page.")
		return
	}
	p, err := h.b.Rerun(r.Context(), s.Viewer, api.RerunInput{Run: id})
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.log.Info("run re-run from the web", "run", id, "pipeline", p.ID, "by", s.Viewer.Handle)
	if len(p.Runs) == 1 {
		http.Redirect(w, r, fmt.Sprintf("/-/runs/%d", p.Runs[0].ID), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, fmt.Sprintf("/%s#p%d", p.Repo, p.ID), http.StatusSeeOther)
}

// rerunFailed runs again the runs of an ended pipeline that did not
// succeed (the Re-run failed button) and shows the Pipelines tab.
func (h *Handler) rerunFailed(w http.ResponseWriter, r *http.Request, s *Session) {
	id, err := strconv.ParseInt(r.PathValue("pipeline"), 10, 64)
	if err != nil || id <= 0 {
		h.errorPage(w, r, s, http.StatusNotFound, "No such page.")
		return
	}
	p, err := h.b.Rerun(r.Context(), s.Viewer, api.RerunInput{Pipeline: id})
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.log.Info("failed runs re-run from the web", "pipeline", id, "new_pipeline", p.ID, "runs", len(p.Runs), "by", s.Viewer.Handle)
	done := fmt.Sprintf("re-ran %d %s of pipeline #%d as pipeline #%d", len(p.Runs), plural(len(p.Runs), "run", "runs"), id, p.ID)
	http.Redirect(w, r, fmt.Sprintf("/%s?done=%s#p%d", p.Repo, urlQuery(done), p.ID), http.StatusSeeOther)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request, s *Session) {
	id := runID(r)
	if id == 0 {
		h.errorPage(w, r, s, http.StatusNotFound, "No such page.")
		return
	}
	if err := h.b.CancelRun(r.Context(), s.Viewer, id); err != nil && !isStatus(err, http.StatusConflict) {
		h.fail(w, r, s, err)
		return
	}
	h.log.Info("run cancelled from the web", "run", id, "by", s.Viewer.Handle)
	http.Redirect(w, r, fmt.Sprintf("/-/runs/%d", id), http.StatusSeeOther)
}

func stepParam(r *http.Request) (int, bool) {
	n, err := strconv.Atoi(r.PathValue("step"))
	return n, err == nil && n >= 0
}

func (h *Handler) rawLog(w http.ResponseWriter, r *http.Request, s *Session) {
	id, step, ok := runID(r), 0, false
	if step, ok = stepParam(r); !ok || id == 0 {
		h.errorPage(w, r, s, http.StatusNotFound, "No such page.")
		return
	}
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="run-%d-step-%d.log"`, id, step))
	if err := h.b.ServeLog(w, r, s.Viewer, id, step); err != nil {
		w.Header().Del("Content-Disposition")
		h.fail(w, r, s, err)
	}
}

func (h *Handler) outputs(w http.ResponseWriter, r *http.Request, s *Session) {
	id := runID(r)
	if id == 0 {
		h.errorPage(w, r, s, http.StatusNotFound, "No such page.")
		return
	}
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="run-%d-outputs.tar"`, id))
	if err := h.b.ServeOutputs(w, r, s.Viewer, id); err != nil {
		w.Header().Del("Content-Disposition")
		h.fail(w, r, s, err)
	}
}

// isFinal is api.IsFinal, for the pages.
func isFinal(state string) bool { return api.IsFinal(state) }
