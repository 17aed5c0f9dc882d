package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
)

// runRerunOptions is `knotless run rerun ID` or `knotless run rerun
// --pipeline N`: exactly one of the two.
type runRerunOptions struct {
	Pipeline string   // --pipeline as given
	Follow   bool     // -f
	args     []string // the run ID, if given
	json     bool     // --json, from the session
}

func (s *session) runRerunCmd() *cobra.Command {
	o := &runRerunOptions{}
	cmd := &cobra.Command{
		Use:   "rerun ID | --pipeline N [-f]",
		Short: "Run a finished run again, or a pipeline's failed runs",
		Long: `Run again, in a new pipeline of the same ref, commit and event, the workflow
of a finished run (ID), or with --pipeline the workflow of every run of a
finished pipeline that did not succeed (failed, errored or cancelled). Each
runs from its file at that commit, whatever its on: section says; the new
pipeline names the one it re-runs, and you as who started it. Re-running
takes the right to trigger runs of the repository (its owner, an admin). A
run or pipeline that has not ended yet is refused (exit 1): cancel it or
wait. Prints the new runs; with -f follows their logs to the end and exits
0 only if every run succeeded.`,
		Example: `  knotless run rerun 42
  knotless run rerun --pipeline 17 -f`,
		Args: cobra.MaximumNArgs(1),
		RunE: s.runE(o),
	}
	cmd.Flags().StringVar(&o.Pipeline, "pipeline", "", "re-run every run of this pipeline that did not succeed")
	cmd.Flags().BoolVarP(&o.Follow, "follow", "f", false, "follow the runs' logs until they end; exit 1 unless all succeeded")
	return cmd
}

func (o *runRerunOptions) complete(_ context.Context, s *session, args []string) error {
	o.args, o.json = args, s.jsonOut
	return nil
}

// validate refuses --json with -f and anything but one run ID or one
// --pipeline id (usage errors).
func (o *runRerunOptions) validate() error {
	if o.Follow && o.json {
		return usageErrorf("--json and -f do not go together: follow the logs, or print the pipeline as JSON")
	}
	_, _, err := o.input()
	return err
}

// input is the request and what it re-runs, in words for errors.
func (o *runRerunOptions) input() (in api.RerunInput, what string, err error) {
	switch {
	case len(o.args) == 1 && o.Pipeline != "":
		return in, "", usageErrorf("name a run ID or --pipeline, not both")
	case len(o.args) == 1:
		id, err := parseRunID(o.args[0])
		if err != nil {
			return in, "", err
		}
		in.Run, what = id, fmt.Sprintf("run %d", id)
	case o.Pipeline != "":
		id, err := strconv.ParseInt(o.Pipeline, 10, 64)
		if err != nil || id <= 0 {
			return in, "", usageErrorf("--pipeline %q: want a pipeline id", o.Pipeline)
		}
		in.Pipeline, what = id, fmt.Sprintf("the failed runs of pipeline %d", id)
	default:
		return in, "", usageErrorf("name a run ID, or --pipeline N for a pipeline's failed runs")
	}
	return in, what, nil
}

func (o *runRerunOptions) run(ctx context.Context, s *session) error {
	in, what, err := o.input()
	if err != nil {
		return err
	}
	var p api.Pipeline
	if err := s.procedure(ctx, api.MethodRerun, in, &p); err != nil {
		return fmt.Errorf("re-run %s: %w", what, err)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), p)
	}
	fmt.Fprintf(s.stdout(), "Pipeline %d re-runs %s of pipeline %d at %s (%s): %d %s.\n", p.ID, plural(len(p.Runs), "a run", "runs"),
		p.RerunOf, api.VisibleText(shortRef(p.Ref)), shortSHA(p.SHA), len(p.Runs), plural(len(p.Runs), "run", "runs"))
	return s.printNewRuns(ctx, p.Runs, o.Follow)
}

// printEmptyPipelines prints, newest first, the pipelines that made no
// run and why: "Pipeline 7 (push of main at 1a2b3c4, 2m ago) ran nothing:"
// and its notes, each on a line of its own.
func printEmptyPipelines(w io.Writer, ps []api.EmptyPipeline) {
	for _, p := range ps {
		fmt.Fprintf(w, "Pipeline %d (%s of %s at %s) ran nothing:\n", p.ID, p.Event, api.VisibleText(shortRef(p.Ref)), shortSHA(p.SHA))
		for _, n := range p.Notes {
			fmt.Fprintf(w, "  %s\n", api.VisibleText(n))
		}
	}
	if len(ps) > 0 {
		fmt.Fprintln(w)
	}
}

// printPipelineNotes prints the notes of the pipelines of runs, once per
// pipeline, oldest pipeline first (e.g. a file in .knotless/workflows that
// is not a workflow and did not run).
func printPipelineNotes(w io.Writer, runs []api.Run) {
	seen := map[int64]bool{}
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		if len(r.PipelineNotes) == 0 || seen[r.Pipeline] {
			continue
		}
		seen[r.Pipeline] = true
		for _, n := range r.PipelineNotes {
			fmt.Fprintf(w, "Note, pipeline %d: %s\n", r.Pipeline, api.VisibleText(n))
		}
	}
}
