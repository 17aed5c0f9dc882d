package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strconv"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/runlog"
)

func (s *session) runCmd() *cobra.Command {
	cmd := group("run", "List, show, follow, cancel, trigger and re-run runs", `Work with runs. A push (or `+"`knotless run trigger`"+`) makes a pipeline: one run per
matching workflow. A run is queued, claimed by a runner, running, then ends
succeeded, failed, cancelled or errored, with a reason when it did not
succeed.`)
	cmd.AddCommand(s.runListCmd(), s.runShowCmd(), s.runLogsCmd(), s.runOutputsCmd(), s.runCancelCmd(), s.runTriggerCmd(), s.runRerunCmd())
	return cmd
}

// parseRunID reads a run id argument.
func parseRunID(arg string) (int64, error) {
	id, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || id <= 0 {
		return 0, usageErrorf("run id %q: want a positive number (see knotless run list)", arg)
	}
	return id, nil
}

func (s *session) getRun(ctx context.Context, id int64) (api.Run, error) {
	var r api.Run
	err := s.query(ctx, api.MethodGetRun, url.Values{"run": {strconv.FormatInt(id, 10)}}, &r)
	if err != nil {
		return r, fmt.Errorf("get run %d: %w", id, err)
	}
	return r, nil
}

// listRuns calls run.list; repo "" and pipeline 0 mean any, limit 0 the
// server's default, cursor "" the first page. It returns one page and the
// cursor of the next ("" when there is none).
func (s *session) listRuns(ctx context.Context, repo string, pipeline int64, limit int, cursor string) ([]api.Run, string, error) {
	out, err := s.listRunsPage(ctx, repo, pipeline, limit, cursor)
	return out.Runs, out.Cursor, err
}

// listRunsPage is listRuns's whole answer, with the repository's
// pipelines that made no run (api.ListRunsOutput.EmptyPipelines).
func (s *session) listRunsPage(ctx context.Context, repo string, pipeline int64, limit int, cursor string) (api.ListRunsOutput, error) {
	p := url.Values{}
	if cursor != "" {
		p.Set("cursor", cursor)
	}
	if repo != "" {
		p.Set("repo", repo)
	}
	if pipeline > 0 {
		p.Set("pipeline", strconv.FormatInt(pipeline, 10))
	}
	if limit > 0 {
		p.Set("limit", strconv.Itoa(limit))
	}
	var out api.ListRunsOutput
	if err := s.query(ctx, api.MethodListRuns, p, &out); err != nil {
		if repo != "" {
			return out, fmt.Errorf("list runs of %s: %w", repo, err)
		}
		return out, fmt.Errorf("list runs: %w", err)
	}
	return out, nil
}

// latestPipeline is the id of the newest pipeline (of repo, if set), 0 when
// there is none.
func (s *session) latestPipeline(ctx context.Context, repo string) (int64, error) {
	page, err := s.listRunsPage(ctx, repo, 0, 20, "")
	if err != nil {
		return 0, err
	}
	var max int64
	for _, r := range page.Runs {
		max = fmax(max, r.Pipeline)
	}
	for _, p := range page.EmptyPipelines { // one that ran nothing may be the newest
		max = fmax(max, p.ID)
	}
	return max, nil
}

func fmax(a, b int64) int64 {
	if b > a {
		return b
	}
	return a
}

// pipelineRuns lists the runs of one pipeline, oldest first.
func (s *session) pipelineRuns(ctx context.Context, repo string, pipeline int64) ([]api.Run, error) {
	var runs []api.Run
	cursor := ""
	for {
		page, next, err := s.listRuns(ctx, repo, pipeline, 0, cursor)
		if err != nil {
			return nil, err
		}
		runs = append(runs, page...)
		if next == "" || next == cursor {
			break
		}
		cursor = next
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].ID < runs[j].ID })
	return runs, nil
}

// runListOptions is `knotless run list`: the flags as given and the
// repository they name ("" for every one the caller sees), once completed.
type runListOptions struct {
	Repo     string // --repo
	Pipeline string // --pipeline: "", an id or "latest"
	Cursor   string // --cursor
	Limit    int    // --limit
	repo     string // OWNER/NAME or ""
}

func (s *session) runListCmd() *cobra.Command {
	o := &runListOptions{}
	cmd := &cobra.Command{
		Use:   "list [--repo R] [--pipeline N|latest] [--limit N] [--cursor C]",
		Short: "List runs, newest first",
		Long: `List runs, newest first: of one repository with --repo (or $KNOTLESS_REPO),
else of every repository you can see. --pipeline narrows to one pipeline;
"latest" is the newest one.

With --pipeline the runs are shown as their pipeline's graph: in stages (a
workflow comes after the workflows it needs), the runs of a matrix under
their workflow, and each retried run's attempts under it.`,
		Example: `  knotless run list --repo alice/app
  knotless run list --repo alice/app --pipeline latest
  knotless run list --limit 5 --json`,
		Args: noArgs,
		RunE: s.runE(o),
	}
	s.addRepoFlag(cmd, &o.Repo)
	cmd.Flags().StringVar(&o.Pipeline, "pipeline", "", "only runs of this pipeline id, or latest")
	cmd.Flags().IntVarP(&o.Limit, "limit", "n", 0, "at most this many runs (0: the server's default)")
	cmd.Flags().StringVar(&o.Cursor, "cursor", "", "the page of older runs a previous list pointed to")
	return cmd
}

func (o *runListOptions) complete(ctx context.Context, s *session, _ []string) (err error) {
	o.repo, err = s.repoArg(ctx, o.Repo, false)
	return err
}

// validate refuses a negative --limit and a --pipeline that is neither a
// pipeline id nor latest (usage errors).
func (o *runListOptions) validate() error {
	if o.Limit < 0 {
		return usageErrorf("--limit %d: want 0 (server default) or more", o.Limit)
	}
	if o.Pipeline != "" && o.Pipeline != "latest" {
		if _, err := o.pipelineID(); err != nil {
			return err
		}
	}
	return nil
}

// pipelineID is --pipeline as an id: 0 for none, the newest for latest.
func (o *runListOptions) pipelineID() (int64, error) {
	if o.Pipeline == "" || o.Pipeline == "latest" {
		return 0, nil
	}
	pid, err := strconv.ParseInt(o.Pipeline, 10, 64)
	if err != nil || pid <= 0 {
		return 0, usageErrorf("--pipeline %q: want a pipeline id or latest", o.Pipeline)
	}
	return pid, nil
}

func (o *runListOptions) run(ctx context.Context, s *session) error {
	pid, err := o.pipelineID()
	if err != nil {
		return err
	}
	if o.Pipeline == "latest" {
		if pid, err = s.latestPipeline(ctx, o.repo); err != nil {
			return err
		}
		if pid == 0 {
			return &exitError{code: ExitNotFound, msg: "no pipelines yet" + inRepo(o.repo) + ": push a commit or run knotless run trigger"}
		}
	}
	page, err := s.listRunsPage(ctx, o.repo, pid, o.Limit, o.Cursor)
	if err != nil {
		return err
	}
	runs, next := page.Runs, page.Cursor
	if runs == nil {
		runs = []api.Run{}
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), api.ListRunsOutput{Runs: runs, Cursor: next, EmptyPipelines: page.EmptyPipelines})
	}
	printEmptyPipelines(s.stdout(), page.EmptyPipelines)
	if len(runs) == 0 {
		if pid == 0 || len(page.EmptyPipelines) == 0 {
			fmt.Fprintln(s.stdout(), "No runs"+inRepo(o.repo)+".")
		}
		return nil
	}
	if pid != 0 {
		all, err := s.pipelineRuns(ctx, o.repo, pid)
		if err != nil {
			return err
		}
		return s.printGraph(s.stdout(), all)
	}
	if err := s.printRuns(s.stdout(), runs); err != nil {
		return err
	}
	printPipelineNotes(s.stdout(), runs)
	if next != "" {
		fmt.Fprintf(s.stderr(), "Older runs: add --cursor %s\n", next)
	}
	return nil
}

func inRepo(repo string) string {
	if repo == "" {
		return ""
	}
	return " in " + repo
}

// printRuns prints a table of runs; a scheduled run's REF says so.
func (s *session) printRuns(w io.Writer, runs []api.Run) error {
	now := s.now()
	t := newTable(w, "RUN", "PIPELINE", "REPO", "WORKFLOW", "REF", "COMMIT", "STATE", "CREATED", "DURATION")
	for _, r := range runs {
		ref := shortRef(r.Ref)
		if r.Event == api.EventSchedule {
			ref += " (scheduled)" // the pipeline a schedule started, not a push
		}
		t.row(strconv.FormatInt(r.ID, 10), strconv.FormatInt(r.Pipeline, 10), r.Repo, r.Workflow+attemptText(r),
			ref, shortSHA(r.SHA), stateText(r.State, r.Reason), ago(r.CreatedAt, now), runDuration(r, now))
	}
	return t.flush()
}

// runShowOptions is `knotless run show ID`.
type runShowOptions struct {
	id int64 // the run's ID
}

func (s *session) runShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show a run and its steps",
		Long: `Show one run: repository, pipeline (its event and who pushed or triggered
it), commit (and the one the push replaced), workflow, state, reason, runner, times, a
table of its steps (index 0 is the setup log) and, when the run stored
outputs, their paths and sizes, the archive's size and SHA-256 (download
them with knotless run outputs ID).`,
		Example: `  knotless run show 42
  knotless run show 42 --json | jq .state`,
		Args: exactArgs(1, "one run ID"),
		RunE: s.runE(&runShowOptions{}),
	}
}

// complete reads the ID (a usage error if it is not a positive number).
func (o *runShowOptions) complete(_ context.Context, _ *session, args []string) (err error) {
	o.id, err = parseRunID(args[0])
	return err
}

func (o *runShowOptions) validate() error { return nil }

func (o *runShowOptions) run(ctx context.Context, s *session) error {
	r, err := s.getRun(ctx, o.id)
	if err != nil {
		return err
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), r)
	}
	var logsGone string
	if api.IsFinal(r.State) {
		logsGone = s.logsExpired(ctx, r.ID)
	}
	if err := s.printRun(s.stdout(), r, logsGone); err != nil || r.Outputs == nil {
		return err
	}
	return s.printOutputs(ctx, s.stdout(), r)
}

// printRun prints run r; logsGone, when not empty, is the server's
// sentence of when its logs expired, said instead of their sizes.
func (s *session) printRun(w io.Writer, r api.Run, logsGone string) error {
	now := s.now()
	fmt.Fprintf(w, "Run %d: %s\n", r.ID, stateText(r.State, r.Reason))
	kv := newTable(w, "Repository:", r.Repo)
	trigger := r.Event
	switch {
	case r.Event == api.EventSchedule && r.Actor == api.ScheduleActor:
		trigger = "scheduled" // not "schedule by schedule"
	case r.Actor != "":
		trigger += " by " + r.Actor
	}
	if r.PipelineRerunOf != 0 {
		trigger += fmt.Sprintf(", re-run of pipeline %d", r.PipelineRerunOf)
	}
	kv.row("Pipeline:", fmt.Sprintf("%d (%s)", r.Pipeline, trigger))
	for _, n := range r.PipelineNotes {
		kv.row("Note:", n)
	}
	kv.row("Workflow:", fmt.Sprintf("%s (%s)", r.Workflow, r.WorkflowPath))
	s.graphRows(kv, r)
	commit := fmt.Sprintf("%s at %s", shortSHA(r.SHA), shortRef(r.Ref))
	if r.BeforeSHA != "" {
		commit += fmt.Sprintf(" (was %s)", shortSHA(r.BeforeSHA))
	}
	kv.row("Commit:", commit)
	if r.ExitCode != nil {
		kv.row("Exit code:", exitText(r.ExitCode))
	}
	if r.Message != "" {
		kv.row("Message:", r.Message)
	}
	if r.ConcurrencyGroup != "" {
		kv.row("Concurrency:", r.ConcurrencyGroup)
	}
	kv.row("Runner:", r.Runner)
	kv.row("Created:", ago(r.CreatedAt, now))
	kv.row("Started:", agoPtr(r.StartedAt, now))
	kv.row("Duration:", runDuration(r, now))
	if err := kv.flush(); err != nil {
		return err
	}
	if len(r.Steps) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	steps := append([]api.Step(nil), r.Steps...)
	sort.Slice(steps, func(i, j int) bool { return steps[i].Index < steps[j].Index })
	t := newTable(w, "STEP", "NAME", "STATE", "EXIT", "STARTED", "ENDED", "DURATION", "LOG")
	logSize := func(n int64) string { return size(n) }
	if logsGone != "" {
		logSize = func(int64) string { return "expired" }
	}
	for _, st := range steps {
		name, state := st.Name, st.State
		if st.Index == api.SetupStep {
			if name == "" {
				name = "setup"
			}
			// The words `knotless run logs` shows: "done", or the run's
			// state when setup ended it.
			state = runlog.SetupState(st.State, r.State)
		}
		started, ended, took := stepTimes(st, now)
		t.row(strconv.Itoa(st.Index), name, stateText(state, st.Reason), exitText(st.ExitCode), started, ended, took, logSize(st.LogSize))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if logsGone != "" {
		fmt.Fprintf(w, "\nLogs: %s\n", logsGone)
		return nil
	}
	fmt.Fprintf(w, "\nLogs: knotless run logs %d\n", r.ID)
	return nil
}

// logsExpired asks the server whether the logs of ended run id expired:
// its sentence (which run, when, where the rules are) when they did, ""
// when they are kept or the server does not say. It reads no log bytes
// (an offset past any log).
func (s *session) logsExpired(ctx context.Context, id int64) string {
	_, _, _, err := s.fetchLog(ctx, io.Discard, id, api.SetupStep, 1<<62, 0)
	if ae := (*api.Error)(nil); errors.As(err, &ae) && ae.Name == api.ErrLogsExpired {
		return ae.Message
	}
	return ""
}

// runCancelOptions is `knotless run cancel ID`.
type runCancelOptions struct {
	id int64 // the run's ID
}

func (s *session) runCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a queued or running run",
		Long: `Ask the server to cancel a run. A queued run ends at once; a running one ends
when its runner hears of it (within seconds): the step gets SIGTERM, then
SIGKILL after a grace period, and the run ends cancelled. A run that has
already finished cannot be cancelled (exit 1).`,
		Example: `  knotless run cancel 42`,
		Args:    exactArgs(1, "one run ID"),
		RunE:    s.runE(&runCancelOptions{}),
	}
}

// complete reads the ID (a usage error if it is not a positive number).
func (o *runCancelOptions) complete(_ context.Context, _ *session, args []string) (err error) {
	o.id, err = parseRunID(args[0])
	return err
}

func (o *runCancelOptions) validate() error { return nil }

func (o *runCancelOptions) run(ctx context.Context, s *session) error {
	id := o.id
	var r api.Run
	if err := s.procedure(ctx, api.MethodCancelRun, api.RunRef{Run: id}, &r); err != nil {
		return fmt.Errorf("cancel run %d: %w", id, err)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), r)
	}
	switch {
	case r.State == api.StateCancelled:
		fmt.Fprintf(s.stdout(), "Run %d cancelled.\n", id)
	case api.IsFinal(r.State):
		fmt.Fprintf(s.stdout(), "Run %d had already finished: %s.\n", id, stateText(r.State, r.Reason))
	default:
		fmt.Fprintf(s.stdout(), "Cancelling run %d (%s); its runner stops it within seconds. Watch: knotless run logs %d -f\n", id, r.State, id)
	}
	return nil
}

// runTriggerOptions is `knotless run trigger`. Its repository is
// resolved in run, after validate, as the command always did: a bad flag is
// told before a missing or unknown --repo.
type runTriggerOptions struct {
	Repo     string // --repo
	Ref      string // --ref: a branch or tag, "" for the default branch
	SHA      string // --sha: a full commit id on Ref, "" for Ref's newest
	Workflow string // --workflow: a name or file path, "" for every manual one
	Follow   bool   // -f
	json     bool   // --json, from the session
}

func (s *session) runTriggerCmd() *cobra.Command {
	o := &runTriggerOptions{}
	cmd := &cobra.Command{
		Use:   "trigger --repo R [--ref REF] [--sha COMMIT] [--workflow W] [-f]",
		Short: "Start a manual pipeline for a branch or tag",
		Long: `Start a manual pipeline: one run for each workflow whose on: section has
manual, at the commit REF points at (default: the default branch). --workflow
limits it to the workflow with that name or file path. Prints the pipeline's
runs; with -f follows their logs to the end and exits 0 only if every run
succeeded.

--ref names an existing branch or tag, by name (main, v1.0) or full ref
(refs/heads/main, refs/tags/v1.0); it is what the runs get as KNOTLESS_REF.
It is never a revision expression: main~5, main^{commit} or HEAD@{1} are
refused (exit 2). To run an older commit, give its full id with --sha: it
must be on REF (reachable from its commit), and REF is still the run's ref.`,
		Example: `  knotless run trigger --repo alice/app
  knotless run trigger --repo alice/app --ref release/1.2 --workflow deploy -f
  knotless run trigger --repo alice/app --ref main --sha $(git rev-parse main~5)`,
		Args: noArgs,
		RunE: s.runE(o),
	}
	s.addRepoFlag(cmd, &o.Repo)
	cmd.Flags().StringVar(&o.Ref, "ref", "", "existing branch or tag (name or full ref) to run (default: the default branch); no revision expressions")
	cmd.Flags().StringVar(&o.SHA, "sha", "", "run this commit (full id) of --ref instead of its newest")
	cmd.Flags().StringVarP(&o.Workflow, "workflow", "w", "", "only the workflow with this name or file path")
	cmd.Flags().BoolVarP(&o.Follow, "follow", "f", false, "follow the runs' logs until they end; exit 1 unless all succeeded")
	return cmd
}

func (o *runTriggerOptions) complete(_ context.Context, s *session, _ []string) error {
	o.json = s.jsonOut
	return nil
}

// validate refuses --json with -f, a --ref that is not a plain branch or
// tag and a --sha that is not a full commit id (usage errors).
func (o *runTriggerOptions) validate() error {
	if o.Follow && o.json {
		return usageErrorf("--json and -f do not go together: follow the logs, or print the pipeline as JSON")
	}
	if err := api.CheckTriggerRef(o.Ref); err != nil {
		return usageErrorf("--ref: %v", err)
	}
	if o.SHA != "" {
		if err := api.CheckCommitID(o.SHA); err != nil {
			return usageErrorf("--sha: %v", err)
		}
	}
	return nil
}

func (o *runTriggerOptions) run(ctx context.Context, s *session) error {
	r, err := s.repoArg(ctx, o.Repo, true)
	if err != nil {
		return err
	}
	var p api.Pipeline
	in := api.TriggerInput{Repo: r, Ref: o.Ref, SHA: o.SHA, Workflow: o.Workflow}
	if err := s.procedure(ctx, api.MethodTriggerRun, in, &p); err != nil {
		return fmt.Errorf("trigger %s: %w", r, err)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), p)
	}
	fmt.Fprintf(s.stdout(), "Pipeline %d of %s at %s (%s): %d %s.\n", p.ID, p.Repo, shortRef(p.Ref), shortSHA(p.SHA),
		len(p.Runs), plural(len(p.Runs), "run", "runs"))
	if len(p.Runs) == 0 {
		return failf("no workflow of %s at %s has a manual trigger (on: manual)%s", r, orDefault(o.Ref), forWorkflow(o.Workflow))
	}
	return s.printNewRuns(ctx, p.Runs, o.Follow)
}

// printNewRuns prints the runs a trigger or re-run made and, with follow,
// follows their logs to the end (exit 1 unless all succeeded).
func (s *session) printNewRuns(ctx context.Context, runs []api.Run, follow bool) error {
	if err := s.printRuns(s.stdout(), runs); err != nil {
		return err
	}
	if !follow {
		return nil
	}
	fmt.Fprintln(s.stdout())
	return s.followRuns(ctx, runs)
}

func orDefault(ref string) string {
	if ref == "" {
		return "the default branch"
	}
	return ref
}

func forWorkflow(wf string) string {
	if wf == "" {
		return ""
	}
	return " named " + wf
}
