package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/units"
)

// `knotless schedule list|pause|resume` (issue 38): a repository's
// schedules (the `on: schedule:` entries of the workflows on its default
// branch), their next and latest due times, and pausing one without
// editing the file.

func (s *session) scheduleCmd() *cobra.Command {
	cmd := group("schedule", "List, pause and resume a repository's scheduled runs", `Work with a repository's schedules: each `+"`on: schedule:`"+` entry (a cron
expression, its time zone and branch) of a workflow on the repository's
default branch is one schedule, which starts a pipeline (event "schedule")
at each of its times. A paused schedule starts none until it is resumed;
the times passed while it was paused do not run. See docs/workflow.md,
"Schedules".`)
	cmd.AddCommand(s.scheduleListCmd(), s.schedulePauseCmd(true), s.schedulePauseCmd(false))
	return cmd
}

// scheduleListOptions is `knotless schedule list [OWNER/NAME]`.
type scheduleListOptions struct {
	Repo string // --repo
	repo string // OWNER/NAME, once completed
}

func (s *session) scheduleListCmd() *cobra.Command {
	o := &scheduleListOptions{}
	c := &cobra.Command{
		Use:   "list [OWNER/NAME]",
		Short: "List a repository's schedules and when each runs next",
		Long: `List a repository's schedules, one a line:

  ID        the schedule's number (for pause and resume)
  WORKFLOW  the workflow file that declares it
  CRON      its expression and time zone
  BRANCH    the branch its runs run on
  NEXT      when it starts its next run (UTC, and how soon), or that it is
            paused (by whom, since when), or why it does not run
  LAST      the due time of the latest run it started, and that run's
            pipeline

The repository is the argument or --repo, else $` + EnvRepo + `; NAME alone is one
of yours.`,
		Example: `  knotless schedule list alice/app
  knotless schedule list --repo alice/app --json`,
		Args: cobra.MaximumNArgs(1),
		RunE: s.runE(o),
	}
	s.addRepoFlag(c, &o.Repo)
	return c
}

func (o *scheduleListOptions) complete(ctx context.Context, s *session, args []string) (err error) {
	flag := o.Repo
	if len(args) == 1 {
		if o.Repo != "" && o.Repo != args[0] {
			return usageErrorf("two repositories: %s and --repo %s; give one", args[0], o.Repo)
		}
		flag = args[0]
	}
	o.repo, err = s.repoArg(ctx, flag, true)
	return err
}

func (o *scheduleListOptions) validate() error { return nil }

func (o *scheduleListOptions) run(ctx context.Context, s *session) error {
	var out api.ScheduleList
	if err := s.query(ctx, api.MethodListSchedules, url.Values{"repo": {o.repo}}, &out); err != nil {
		return fmt.Errorf("list the schedules of %s: %w", o.repo, err)
	}
	if out.Schedules == nil {
		out.Schedules = []api.Schedule{}
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), out)
	}
	return printSchedules(s.stdout(), o.repo, out, s.now())
}

// printSchedules prints a repository's schedules as `schedule list`'s
// table, or how to declare one when there is none.
func printSchedules(w io.Writer, repo string, l api.ScheduleList, now time.Time) error {
	if len(l.Schedules) == 0 {
		fmt.Fprintf(w, `No schedules in %s. A workflow on the default branch declares one:

  on:
    schedule:
      - cron: "0 3 * * *"   # every day at 03:00 UTC

(docs/workflow.md, "Schedules")%s.
`, repo, minIntervalText(l.MinIntervalSeconds))
		return nil
	}
	t := newTable(w, "ID", "WORKFLOW", "CRON", "BRANCH", "NEXT", "LAST")
	for _, sc := range l.Schedules {
		t.row(strconv.FormatInt(sc.ID, 10), path.Base(sc.Workflow), cronText(sc), sc.Branch, nextText(sc, now), lastText(sc))
	}
	return t.flush()
}

// minIntervalText is ": this server runs a schedule at most every 5m", or
// "" when the server said no limit.
func minIntervalText(secs int64) string {
	if secs <= 0 {
		return ""
	}
	return "; this server runs a schedule at most every " + units.FormatDuration(time.Duration(secs)*time.Second)
}

// cronText is a schedule's expression and zone: "0 3 * * * (Europe/Berlin)".
func cronText(sc api.Schedule) string {
	zone := sc.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	return sc.Cron + " (" + zone + ")"
}

// utcText writes a due time in UTC to the minute ("2026-12-08 03:00 UTC"),
// with seconds when it has any.
func utcText(t time.Time) string {
	t = t.UTC()
	if t.Second() != 0 {
		return t.Format("2006-01-02 15:04:05 UTC")
	}
	return t.Format("2006-01-02 15:04 UTC")
}

// untilText says how soon t is from now in at most two units: "in 45s",
// "in 12m 30s", "in 3h 12m", "in 2d 4h"; "due now" from the time itself
// to 5 s past it, "due 3m ago" for a time passed
// longer (the server has yet to start it).
func untilText(t, now time.Time) string {
	d := t.Sub(now)
	if d > -5*time.Second && d < time.Second {
		return "due now"
	}
	ago := d < 0
	if ago {
		d = -d
	}
	d = d.Round(time.Second)
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		s = twoUnits(d, time.Minute, "m", time.Second, "s")
	case d < 48*time.Hour:
		s = twoUnits(d, time.Hour, "h", time.Minute, "m")
	default:
		s = twoUnits(d, 24*time.Hour, "d", time.Hour, "h")
	}
	if ago {
		return "due " + s + " ago"
	}
	return "in " + s
}

// twoUnits is d in big units and the rest in small ones, the rest left out
// when it is 0: "3h 12m", "3h".
func twoUnits(d, big time.Duration, bigName string, small time.Duration, smallName string) string {
	b, rest := int(d/big), int(d%big/small)
	if rest == 0 {
		return fmt.Sprintf("%d%s", b, bigName)
	}
	return fmt.Sprintf("%d%s %d%s", b, bigName, rest, smallName)
}

// nextText is a schedule's NEXT: "2026-12-08 03:00 UTC (in 3h 12m)";
// "paused by alice since 2026-12-07 09:30 UTC"; or "not running: PROBLEM".
func nextText(sc api.Schedule, now time.Time) string {
	switch {
	case sc.Paused:
		s := "paused"
		if sc.PausedBy != "" {
			s += " by " + sc.PausedBy
		}
		if sc.PausedAt != nil {
			s += " since " + utcText(*sc.PausedAt)
		}
		return s
	case sc.Problem != "":
		// Its times are skipped while the problem holds: the next one
		// is no run to announce.
		return "not running: " + sc.Problem
	case sc.NextAt != nil:
		return fmt.Sprintf("%s (%s)", utcText(*sc.NextAt), untilText(*sc.NextAt, now))
	}
	return ""
}

// lastText is a schedule's LAST: "2026-12-07 03:00 UTC, pipeline 41", or
// "never".
func lastText(sc api.Schedule) string {
	if sc.LastAt == nil {
		return "never"
	}
	s := utcText(*sc.LastAt)
	if sc.LastPipeline != 0 {
		s += ", pipeline " + strconv.FormatInt(sc.LastPipeline, 10)
	}
	return s
}

// schedulePauseOptions is `knotless schedule pause ID` (paused) and
// `knotless schedule resume ID`.
type schedulePauseOptions struct {
	Repo   string // --repo
	paused bool   // pause, or resume
	id     int64
	repo   string // OWNER/NAME, once completed
}

func (s *session) schedulePauseCmd(paused bool) *cobra.Command {
	o := &schedulePauseOptions{paused: paused}
	c := &cobra.Command{
		Use:   "pause ID [--repo R]",
		Short: "Pause a schedule: it starts no runs until resumed",
		Long: `Pause a schedule of a repository (owner or admin) without editing its
workflow: it starts no runs until knotless schedule resume ID, and the times
that pass meanwhile never run. It stays paused across pushes that keep its
entry (the same workflow file, expression, zone and branch). ID is the
number knotless schedule list shows.`,
		Example: `  knotless schedule pause 3 --repo alice/app`,
		Args:    exactArgs(1, "one schedule ID"),
		RunE:    s.runE(o),
	}
	if !paused {
		c.Use = "resume ID [--repo R]"
		c.Short = "Resume a paused schedule from its next time"
		c.Long = `Resume a paused schedule of a repository (owner or admin): its next run is
its next time after now; the times passed while it was paused do not run.
ID is the number knotless schedule list shows.`
		c.Example = `  knotless schedule resume 3 --repo alice/app`
	}
	s.addRepoFlag(c, &o.Repo)
	return c
}

func (o *schedulePauseOptions) complete(ctx context.Context, s *session, args []string) (err error) {
	id, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || id <= 0 {
		return usageErrorf("schedule id %q: want a positive number (see knotless schedule list)", args[0])
	}
	o.id = id
	o.repo, err = s.repoArg(ctx, o.Repo, true)
	return err
}

func (o *schedulePauseOptions) validate() error { return nil }

func (o *schedulePauseOptions) verb() string {
	if o.paused {
		return "pause"
	}
	return "resume"
}

func (o *schedulePauseOptions) run(ctx context.Context, s *session) error {
	var out api.Schedule
	in := api.PauseScheduleInput{Repo: o.repo, ID: o.id, Paused: o.paused}
	if err := s.procedure(ctx, api.MethodPauseSchedule, in, &out); err != nil {
		var ae *api.Error
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound && strings.HasPrefix(ae.Message, "no schedule ") && !strings.Contains(ae.Message, "schedule list") {
			ae.Message = withHint(ae.Message, "knotless schedule list "+o.repo+" shows its schedules")
		}
		return fmt.Errorf("%s schedule %d of %s: %w", o.verb(), o.id, o.repo, err)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), out)
	}
	if out.Repo == "" {
		out.Repo = o.repo
	}
	fmt.Fprintln(s.stdout(), scheduleState(out, s.now()))
	return nil
}

// scheduleState is what pause and resume print: the schedule and its new
// state, e.g. "Schedule 3 of alice/app (nightly.yml, 0 3 * * * (UTC) on
// main): next run 2026-12-08 03:00 UTC (in 3h 12m)."
func scheduleState(sc api.Schedule, now time.Time) string {
	branch := sc.Branch
	if branch == "" {
		branch = "the default branch"
	}
	head := fmt.Sprintf("Schedule %d of %s (%s, %s on %s): ", sc.ID, sc.Repo, path.Base(sc.Workflow), cronText(sc), branch)
	switch {
	case sc.Paused:
		return head + nextText(sc, now) + "; its times do not run until knotless schedule resume " +
			strconv.FormatInt(sc.ID, 10) + " --repo " + sc.Repo + "."
	case sc.Problem != "":
		return head + nextText(sc, now) + "."
	case sc.NextAt != nil:
		return head + "next run " + nextText(sc, now) + "."
	}
	return head + "no next run."
}
