package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/workflow"
)

// maxWorkflowSize caps a workflow file the server reads.
const maxWorkflowSize = 1 << 20

// workflowFile is one file under .knotless/workflows at a commit.
type workflowFile struct {
	Path    string // relative to the repository root
	Source  []byte
	Refused error // the entry is refused (workflow.CheckDir, CheckFile): no Source
}

// parsedWorkflow is a workflow file and the result of parsing it.
type parsedWorkflow struct {
	workflowFile
	WF   *workflow.Workflow   // the first of Runs; nil when Err is set
	Runs []*workflow.Workflow // the runs it makes, one per matrix combination
	Err  error
}

// workflowsAt lists and reads the workflow files (*.yml, *.yaml directly
// under .knotless/workflows) at commit sha, by the rule lint applies too
// (workflow.CheckDir, workflow.CheckFile): a symbolic link, as the
// directory or as a file, or a file named *.YML, is an entry with Err,
// never followed. Every other entry of .knotless/workflows is not run and
// named in notes, with why (workflow.NotWorkflow), for the pipeline, and
// so is a directory of .knotless named almost like it
// (workflow.MisplacedDir: .knotless/workflow).
func (s *Server) workflowsAt(ctx context.Context, dir, sha string) (files []workflowFile, notes []string, err error) {
	parent := path.Dir(workflow.Dir)
	// -t names .knotless and .knotless/workflows themselves (their modes)
	// before the files in the latter.
	out, err := s.git(ctx, dir, "ls-tree", "-z", "-t", sha, "--", parent, parent+"/", workflow.Dir, workflow.Dir+"/")
	if err != nil {
		return nil, nil, fmt.Errorf("list %s at %s: %w", workflow.Dir, sha, err)
	}
	for _, entry := range bytes.Split(out, []byte{0}) {
		meta, p, ok := strings.Cut(string(entry), "\t")
		if !ok {
			continue
		}
		f := strings.Fields(meta) // mode type oid
		if len(f) != 3 {
			continue
		}
		kind := workflow.GitKind(f[0])
		if p == parent || p == workflow.Dir {
			if err := workflow.CheckDir(p, kind); err != nil {
				return []workflowFile{{Path: p, Refused: err}}, nil, nil
			}
			continue
		}
		if path.Dir(p) == parent {
			// A directory named almost like the workflows' is a typo
			// whose files would never run without a word.
			if why := workflow.MisplacedDir(p); kind == workflow.KindDir && why != "" {
				notes = append(notes, workflow.DisplayPath(p)+": not run: "+why)
			}
			continue
		}
		if path.Dir(p) != workflow.Dir {
			continue // elsewhere in .knotless
		}
		if ok, err := workflow.CheckFile(p, kind); !ok {
			notes = append(notes, notRunNote(p, kind))
			continue
		} else if err != nil {
			files = append(files, workflowFile{Path: p, Refused: err})
			continue
		}
		src, err := s.git(ctx, dir, "cat-file", "blob", f[2])
		if err != nil {
			return nil, nil, fmt.Errorf("read %s at %s: %w", p, sha, err)
		}
		if len(src) > maxWorkflowSize {
			src = src[:maxWorkflowSize]
		}
		files = append(files, workflowFile{Path: p, Source: src})
	}
	slices.SortFunc(files, func(a, b workflowFile) int { return strings.Compare(a.Path, b.Path) })
	slices.Sort(notes)
	if len(notes) > maxNotes {
		notes = append(notes[:maxNotes], fmt.Sprintf("and %d more entries of %s that are not workflows (knotless workflow lint lists them)", len(notes)-maxNotes, workflow.Dir))
	}
	return files, notes, nil
}

// maxNotes caps the notes of one pipeline about entries that are not
// workflows.
const maxNotes = 20

// notRunNote is a pipeline's note about an entry p of .knotless/workflows
// that is not a workflow file, e.g. ".knotless/workflows/c.json: not a
// workflow, not run: the file name ends in .json: ...".
func notRunNote(p string, kind workflow.EntryKind) string {
	return workflow.DisplayPath(p) + ": not a workflow, not run: " + workflow.NotWorkflow(p, kind)
}

// parseAll parses every file; a file that fails never stops the others.
func parseAll(files []workflowFile) []parsedWorkflow {
	out := make([]parsedWorkflow, 0, len(files))
	for _, f := range files {
		pw := parsedWorkflow{workflowFile: f}
		if f.Refused != nil {
			pw.Err = f.Refused
			out = append(out, pw)
			continue
		}
		pw.Runs, pw.Err = safeParse(f.Path, f.Source)
		if pw.Err == nil && len(pw.Runs) == 0 {
			pw.Err = fmt.Errorf("%s:1:1: workflow parser returned nothing", f.Path)
		}
		if pw.Err == nil {
			pw.WF = pw.Runs[0]
		}
		out = append(out, pw)
	}
	return out
}

// safeParse is workflow.Expand that turns a panic into an error: a broken
// workflow must never take the server down.
func safeParse(p string, src []byte) (runs []*workflow.Workflow, err error) {
	defer func() {
		if v := recover(); v != nil {
			runs, err = nil, fmt.Errorf("%s:1:1: workflow parser failed: %v", p, v)
		}
	}()
	return workflow.Expand(p, src)
}

// errorLines renders a parse error as FILE:LINE:COL lines.
func errorLines(p string, err error) []string {
	var list workflow.ErrorList
	if errors.As(err, &list) && len(list) > 0 {
		lines := make([]string, 0, len(list))
		for _, e := range list {
			lines = append(lines, e.Error())
		}
		return lines
	}
	var one *workflow.Error
	if errors.As(err, &one) {
		return []string{one.Error()}
	}
	msg := err.Error()
	if dp := workflow.DisplayPath(p); !strings.HasPrefix(msg, dp+":") {
		msg = dp + ":1:1: " + msg
	}
	return strings.Split(msg, "\n")
}

// workflowName is a workflow's name (for a matrix, without the values
// of a run), or its file name without extension when it did not parse.
func workflowName(pw parsedWorkflow) string {
	if pw.WF != nil && pw.WF.Base != "" {
		return pw.WF.Base
	}
	base := path.Base(pw.Path)
	return workflow.DisplayPath(strings.TrimSuffix(base, path.Ext(base)))
}

// plannedRun is a run to create and, for an errored one, its setup log.
type plannedRun struct {
	store.NewRun
	setupLog []byte
}

// planRuns selects the runs of one pipeline: queued runs (one per matrix
// combination) of each workflow that keep keeps and that matches ev
// (every one it keeps when all is set: a re-run), with every workflow
// they need (`needs:`, transitively, whatever its `on:` says), and an
// errored run per selected file that failed to parse or whose needs are
// wrong (workflow.CheckNeeds).
func planRuns(parsed []parsedWorkflow, ev workflow.Event, all bool, keep func(pw parsedWorkflow) bool) []plannedRun {
	selected, resolved := selectWithNeeds(parsed, ev, all, keep)
	var out []plannedRun
	first := map[string][]int{} // path → indexes of its runs in out
	for _, pw := range parsed {
		if !selected[pw.Path] {
			continue
		}
		if pw.Err != nil {
			lines := errorLines(pw.Path, pw.Err)
			msg := lines[0]
			if len(lines) > 1 {
				msg += fmt.Sprintf(" (and %d more)", len(lines)-1)
			}
			out = append(out, plannedRun{
				NewRun: store.NewRun{
					Workflow: workflowName(pw), WorkflowPath: workflow.DisplayPath(pw.Path), Source: string(pw.Source),
					State: api.StateErrored, Reason: api.ReasonWorkflowInvalid, Message: msg,
					Steps: []store.Step{{Index: api.SetupStep, Name: "setup", State: api.StepFailed,
						Reason: api.ReasonWorkflowInvalid}},
				},
				setupLog: []byte(strings.Join(lines, "\n") + "\n"),
			})
			first[pw.Path] = []int{len(out) - 1}
			continue
		}
		for _, wf := range pw.Runs {
			nr := store.NewRun{
				Workflow: wf.Name, WorkflowPath: workflow.DisplayPath(pw.Path), Source: string(pw.Source),
				Secrets: wf.Secrets, Runners: wf.Runners, State: api.StateQueued,
			}
			graphOf(&nr, wf)
			concurrencyOf(&nr, wf, ev)
			first[pw.Path] = append(first[pw.Path], len(out))
			out = append(out, plannedRun{NewRun: nr})
		}
	}
	linkNeeds(out, parsed, resolved, first)
	return out
}

// createPipeline stores a pipeline with its runs, writes the setup logs of
// errored runs and wakes runners waiting for work.
func (s *Server) createPipeline(ctx context.Context, repo store.Repo, ref, sha, event string, trig trigger, planned []plannedRun) (store.Pipeline, []store.Run, error) {
	np := store.NewPipeline{RepoID: repo.ID, Ref: ref, SHA: sha, Event: event, BeforeSHA: trig.before, Actor: trig.actor,
		CreatedAt: s.now(), Notes: trig.notes, RerunOf: trig.rerunOf, Schedule: trig.schedule}
	for _, p := range planned {
		np.Runs = append(np.Runs, p.NewRun)
	}
	p, runs, err := s.store.CreatePipeline(ctx, np)
	if err != nil {
		return p, nil, fmt.Errorf("create pipeline for %s %s: %w", repo.FullName(), ref, err)
	}
	ids := make([]int64, len(runs))
	for i, run := range runs {
		ids[i] = run.ID
		if len(planned[i].setupLog) > 0 {
			if _, _, err := s.logs.append(run.ID, api.SetupStep, 0, planned[i].setupLog); err != nil {
				s.log.Error("write setup log", "run", run.ID, "err", err)
			}
		}
	}
	s.log.Info("pipeline created", "pipeline", p.ID, "repo", repo.FullName(), "ref", ref, "sha", sha,
		"event", event, "runs", ids, "notes", len(trig.notes), "rerun_of", trig.rerunOf)
	for _, run := range runs {
		if run.State == api.StateErrored {
			s.log.Warn("run finished", "run", run.ID, "repo", repo.FullName(), "workflow", run.Workflow,
				"state", run.State, "reason", run.Reason, "message", run.Message)
		}
	}
	s.holdPipelineCommit(ctx, repo, p, runs)
	s.superseded(ctx, repo, planned, runs)
	s.offer(runs) // wakes one waiting runner per queued run
	return p, runs, nil
}

// commitOf peels an object id (a tag object, say) to its commit; ok is
// false when it is not a commit.
func (s *Server) commitOf(ctx context.Context, dir, oid string) (string, bool) {
	out, err := s.git(ctx, dir, "rev-parse", "--verify", "--quiet", oid+"^{commit}")
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(out)), true
}

// trigger is who made a pipeline, and from what: the account's handle and
// the commit the pushed ref pointed at before ("" when new, or manual);
// with the pipeline's notes and the pipeline it re-runs (0: none).
type trigger struct {
	actor, before string
	notes         []string
	rerunOf       int64
	// schedule fires a schedule with the pipeline (store.ScheduleFire):
	// createPipeline then fails with store.ErrConflict when another
	// replica fired that time first.
	schedule *store.ScheduleFire
}

// afterPush makes one pipeline per branch or tag a push (by the account
// actor) created or updated, and returns what the pusher should read about
// each (pushMessages): the pipeline and its runs, or why nothing runs, and
// the pipeline's notes. A push whose workflow files are all ignored (ci.json,
// a directory, .knotless/workflow/) makes a pipeline with no runs and those
// notes, so the pipeline list shows why nothing ran.
func (s *Server) afterPush(ctx context.Context, repo store.Repo, actor string, before, after map[string]string) (lines []string) {
	dir, err := s.repoDir(repo.Owner, repo.Name)
	if err != nil {
		s.log.Error("make pipelines after a push", "repo", repo.FullName(), "err", err)
		return []string{"no pipeline was made: the server's log says why"}
	}
	var changed []string
	for ref, oid := range after {
		if before[ref] != oid && (strings.HasPrefix(ref, "refs/heads/") || strings.HasPrefix(ref, "refs/tags/")) {
			changed = append(changed, ref)
		}
	}
	slices.Sort(changed)
	s.fixHead(ctx, dir, after, changed)
	head := ""
	if out, err := s.git(ctx, dir, "symbolic-ref", "HEAD"); err == nil {
		head = strings.TrimSpace(string(out))
	}
	for _, ref := range changed {
		sha, ok := s.commitOf(ctx, dir, after[ref])
		if !ok {
			continue
		}
		event := "push"
		if strings.HasPrefix(ref, "refs/tags/") {
			event = "tag"
		}
		at := api.VisibleText(strings.TrimPrefix(strings.TrimPrefix(ref, "refs/heads/"), "refs/tags/")) + " at " + sha[:min(len(sha), 7)]
		files, notes, err := s.workflowsAt(ctx, dir, sha)
		if err != nil {
			s.log.Error("read workflows after push", "repo", repo.FullName(), "ref", ref, "err", err)
			lines = append(lines, at+": its workflows could not be read, nothing runs: the server's log says why")
			continue
		}
		parsed := parseAll(files)
		planned := planRuns(parsed, workflow.Event{Kind: workflow.EventPush, Ref: ref}, false,
			func(parsedWorkflow) bool { return true })
		if ref == head {
			lines = append(lines, s.pushSchedules(ctx, repo, dir, at, parsed)...)
		}
		if len(planned) == 0 && len(notes) == 0 {
			s.log.Info("push matched no workflow", "repo", repo.FullName(), "ref", ref, "sha", sha)
			if len(files) == 0 {
				lines = append(lines, at+": no workflow in "+workflow.Dir+"/, nothing runs")
			} else {
				lines = append(lines, fmt.Sprintf("%s: none of the %d workflows runs on a %s of it (their on:), nothing runs", at, len(files), event))
			}
			continue
		}
		var was string
		if old, ok := before[ref]; ok {
			was, _ = s.commitOf(ctx, dir, old)
		}
		p, runs, err := s.createPipeline(ctx, repo, ref, sha, event, trigger{actor: actor, before: was, notes: notes}, planned)
		if err != nil {
			s.log.Error("create pipeline after push", "repo", repo.FullName(), "ref", ref, "err", err)
			lines = append(lines, at+": no pipeline was made: the server's log says why")
			continue
		}
		lines = append(lines, pipelineLine(at, p, runs))
		for _, r := range runs {
			if r.Reason == api.ReasonWorkflowInvalid { // its first problem at FILE:LINE:COL, as lint says it
				lines = append(lines, "  "+r.Message)
			}
		}
		for _, n := range notes {
			lines = append(lines, "  "+n)
		}
	}
	return lines
}

// pipelineLine is a push's line about the pipeline p it made for at
// ("main at 1a2b3c4"), e.g. "main at 1a2b3c4: pipeline 7, 2 runs (build,
// test): knotless run list --pipeline 7", or "... pipeline 7 runs nothing"
// when the notes below say why.
func pipelineLine(at string, p store.Pipeline, runs []store.Run) string {
	if len(runs) == 0 {
		return fmt.Sprintf("%s: pipeline %d runs nothing, because:", at, p.ID)
	}
	var names []string
	for _, r := range runs {
		if !slices.Contains(names, r.Workflow) {
			names = append(names, api.VisibleText(r.Workflow))
		}
	}
	return fmt.Sprintf("%s: pipeline %d, %d %s (%s): knotless run list --pipeline %d", at, p.ID, len(runs), plural(len(runs), "run", "runs"), strings.Join(names, ", "), p.ID)
}

// fixHead points an unborn HEAD at a pushed branch (main if pushed), so
// clones check something out and triggers have a default branch.
func (s *Server) fixHead(ctx context.Context, dir string, refs map[string]string, changed []string) {
	out, err := s.git(ctx, dir, "symbolic-ref", "HEAD")
	if err != nil {
		return
	}
	if _, ok := refs[strings.TrimSpace(string(out))]; ok {
		return
	}
	target := ""
	for _, ref := range changed {
		if ref == "refs/heads/main" || ref == "refs/heads/master" {
			target = ref
			break
		}
		if target == "" && strings.HasPrefix(ref, "refs/heads/") {
			target = ref
		}
	}
	if target != "" {
		if _, err := s.git(ctx, dir, "symbolic-ref", "HEAD", target); err != nil {
			s.log.Warn("set default branch", "dir", dir, "err", err)
		}
	}
}

// resolveRef turns a branch, tag or full ref (default: HEAD's branch) into a
// full ref and its commit. ref is a name, never a revision expression
// (api.CheckTriggerRef), and must name an existing branch or tag exactly.
func (s *Server) resolveRef(ctx context.Context, dir, ref string) (string, string, error) {
	if err := api.CheckTriggerRef(ref); err != nil {
		return "", "", badRequest("%v", err)
	}
	var candidates []string
	switch {
	case ref == "":
		out, err := s.git(ctx, dir, "symbolic-ref", "HEAD")
		if err != nil {
			return "", "", badRequest("the repository has no default branch; name a ref")
		}
		candidates = []string{strings.TrimSpace(string(out))}
	case strings.HasPrefix(ref, "refs/"):
		candidates = []string{ref}
	default:
		candidates = []string{"refs/heads/" + ref, "refs/tags/" + ref}
	}
	for _, c := range candidates {
		// show-ref --verify takes the exact ref only: no revision
		// expression, no search through refs/, refs/tags/, ...
		out, err := s.git(ctx, dir, "show-ref", "--verify", "--hash", "--", c)
		if err != nil {
			continue
		}
		if sha, ok := s.commitOf(ctx, dir, strings.TrimSpace(string(out))); ok {
			return c, sha, nil
		}
	}
	if ref == "" {
		ref = strings.TrimPrefix(candidates[0], "refs/heads/")
	}
	return "", "", xerr(http.StatusNotFound, api.ErrNotFound, "no branch or tag %q in the repository (push it first)", ref)
}

// resolveCommit checks that sha (a full commit id) is a commit that ref's
// commit refSHA reaches, so that a trigger runs only commits of the
// repository's branches and tags.
func (s *Server) resolveCommit(ctx context.Context, dir, ref, refSHA, sha string) (string, error) {
	if err := api.CheckCommitID(sha); err != nil {
		return "", badRequest("%v", err)
	}
	got, ok := s.commitOf(ctx, dir, sha)
	if ok && got == sha {
		if _, err := s.git(ctx, dir, "merge-base", "--is-ancestor", sha, refSHA); err == nil {
			return sha, nil
		}
	}
	return "", xerr(http.StatusNotFound, api.ErrNotFound, "no commit %s on %s in the repository (push it first, or name the branch or tag it is on with --ref)", sha, shortRefName(ref))
}

func shortRefName(ref string) string {
	if s, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
		return s
	}
	return strings.TrimPrefix(ref, "refs/tags/")
}

func (s *Server) triggerRun(w http.ResponseWriter, r *http.Request, a store.Account) error {
	ctx := r.Context()
	var in api.TriggerInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	repo, err := s.managedRepo(ctx, a, in.Repo)
	if err != nil {
		return err
	}
	if err := api.CheckText("workflow", in.Workflow); err != nil {
		return badRequest("%v", err)
	}
	dir, err := s.repoDir(repo.Owner, repo.Name)
	if err != nil {
		return err
	}
	ref, sha, err := s.resolveRef(ctx, dir, in.Ref)
	if err != nil {
		return err
	}
	if in.SHA != "" {
		if sha, err = s.resolveCommit(ctx, dir, ref, sha, in.SHA); err != nil {
			return err
		}
	}
	files, notes, err := s.workflowsAt(ctx, dir, sha)
	if err != nil {
		return err
	}
	parsed := parseAll(files)
	named := func(pw parsedWorkflow) bool {
		return in.Workflow == "" || in.Workflow == pw.Path || in.Workflow == path.Base(pw.Path) ||
			in.Workflow == workflowName(pw)
	}
	if in.Workflow != "" && !slices.ContainsFunc(parsed, named) {
		return xerr(http.StatusNotFound, api.ErrNotFound, "no workflow %q in %s at %s", in.Workflow, workflow.Dir, ref)
	}
	planned := planRuns(parsed, workflow.Event{Kind: workflow.EventManual, Ref: ref}, false, named)
	if len(planned) == 0 {
		if in.Workflow != "" {
			return badRequest("workflow %q at %s has no `manual` trigger; add `manual: {}` under `on:` to allow triggering it",
				in.Workflow, ref)
		}
		return badRequest("no workflow in %s at %s has a `manual` trigger; add `manual: {}` under `on:` to allow triggering",
			workflow.Dir, ref)
	}
	p, runs, err := s.createPipeline(ctx, repo, ref, sha, workflow.EventManual, trigger{actor: a.Handle, notes: notes}, planned)
	if err != nil {
		return err
	}
	return writeJSON(w, apiPipeline(p, runs))
}

// apiPipeline converts a stored pipeline and its runs (without steps).
func apiPipeline(p store.Pipeline, runs []store.Run) api.Pipeline {
	out := api.Pipeline{ID: p.ID, Repo: p.Repo, Ref: p.Ref, SHA: p.SHA, Event: p.Event, CreatedAt: p.CreatedAt,
		Notes: p.Notes, RerunOf: p.RerunOf, Runs: make([]api.Run, 0, len(runs))}
	for _, run := range runs {
		out.Runs = append(out.Runs, apiRun(run, nil))
	}
	return out
}
