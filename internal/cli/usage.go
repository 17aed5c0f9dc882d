package cli

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
)

// `knotless repo usage` and `knotless repo set-retention` (issue 36).

// repoUsageOptions is `knotless repo usage [OWNER/NAME]`.
type repoUsageOptions struct {
	repo string // as given, or $KNOTLESS_REPO
}

func (s *session) repoUsageCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "usage [OWNER/NAME]",
		Short: "Show what a repository's logs, outputs and caches use",
		Long: `Show what a repository uses: its runs' step logs and outputs archives kept on
the server (bytes and how many), its caches in each cache store its runners
reported (bytes and entries, as of the latest run with caches), what
retention removed, and the retention rules in effect. The repository is the
argument, else $` + EnvRepo + `; NAME alone is one of yours.`,
		Example: `  knotless repo usage alice/app
  knotless repo usage alice/app --json | jq .logs.bytes`,
		Args: cobra.MaximumNArgs(1),
		RunE: s.runE(&repoUsageOptions{}),
	}
}

func (o *repoUsageOptions) complete(ctx context.Context, s *session, args []string) error {
	flag := ""
	if len(args) == 1 {
		flag = args[0]
	}
	r, err := s.repoArg(ctx, flag, true)
	o.repo = r
	return err
}

func (o *repoUsageOptions) validate() error { return nil }

func (o *repoUsageOptions) run(ctx context.Context, s *session) error {
	var u api.RepoUsage
	if err := s.query(ctx, api.MethodRepoUsage, url.Values{"repo": {o.repo}}, &u); err != nil {
		return fmt.Errorf("show the usage of %s: %w", o.repo, err)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), u)
	}
	w := s.stdout()
	at := ""
	if u.Partial {
		at = "at least "
	}
	t := newTable(w, "WHAT", "SIZE", "COUNT")
	t.row("logs", at+size(u.Logs.Bytes), plural(int(u.Logs.Count), "1 step log", fmt.Sprintf("%d step logs", u.Logs.Count)))
	t.row("outputs", size(u.Outputs.Bytes), plural(int(u.Outputs.Count), "1 run", fmt.Sprintf("%d runs", u.Outputs.Count)))
	var cb int64
	var ce int
	for _, c := range u.Caches {
		cb, ce = cb+c.Bytes, ce+c.Entries
	}
	t.row("caches", size(cb), plural(ce, "1 entry", fmt.Sprintf("%d entries", ce)))
	now := s.now()
	for _, c := range u.Caches {
		t.row("  "+c.Store, size(c.Bytes), fmt.Sprintf("%s, reported %s", plural(c.Entries, "1 entry", fmt.Sprintf("%d entries", c.Entries)), ago(c.ReportedAt, now)))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if u.Expired.Runs > 0 {
		last := ""
		if u.Expired.LastAt != nil {
			last = ", the latest " + ago(*u.Expired.LastAt, now)
		}
		fmt.Fprintf(w, "\nRetention removed the logs and outputs of %s (%s)%s.\n",
			plural(int(u.Expired.Runs), "1 run", fmt.Sprintf("%d runs", u.Expired.Runs)), size(u.Expired.Bytes), last)
	}
	fmt.Fprintf(w, "\n%s\n", retentionText(u.Retention))
	return nil
}

// retentionText says a repository's retention in two sentences: who set
// the repository's own rules, or that the server's apply (none of its own
// is left, whoever last set them).
func retentionText(r api.Retention) string {
	text := "Retention: " + r.Effective.String()
	if r.SetBy != "" && (r.Own.KeepLogsDays != nil || r.Own.KeepPipelines != nil) {
		return text + " Set for " + r.Repo + " by " + safeText(r.SetBy) + " (the server's: " + strings.TrimSuffix(r.Server.String(), ".") + ")."
	}
	return text + " (The server's setting: knotless repo set-retention " + r.Repo + " changes it.)"
}

// repoSetRetentionOptions is `knotless repo set-retention OWNER/NAME`.
type repoSetRetentionOptions struct {
	repo              string
	Days, Pipes       string // as given: a number, or "server"
	DaysSet, PipesSet bool
	in                api.SetRetentionInput
}

func (s *session) repoSetRetentionCmd() *cobra.Command {
	o := &repoSetRetentionOptions{}
	cmd := &cobra.Command{
		Use:   "set-retention OWNER/NAME [--keep-logs-days N] [--keep-pipelines N]",
		Short: "Set how long a repository's runs keep their logs and outputs",
		Long: `Set a repository's own retention, over the server's (knotless-server
--keep-logs-days, --keep-pipelines). A run's step logs and outputs archive are
removed once every rule that is set lets them go: the run ended more than
--keep-logs-days days ago, and its pipeline is not one of the --keep-pipelines
newest of its branch. The run itself, its result and its steps stay; its page
and knotless run logs say when its logs expired.

N is a number of days or pipelines; 0 keeps everything by that rule; "server"
returns the rule to the server's setting. A rule not given is left as it is.
Keeping more than the server does is an admin's call.`,
		Example: `  knotless repo set-retention alice/app --keep-logs-days 14
  knotless repo set-retention alice/app --keep-pipelines 3 --keep-logs-days 0
  knotless repo set-retention alice/app --keep-logs-days server --keep-pipelines server`,
		Args: exactArgs(1, "one OWNER/NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.DaysSet, o.PipesSet = cmd.Flags().Changed("keep-logs-days"), cmd.Flags().Changed("keep-pipelines")
			return execute(cmd.Context(), s, o, args)
		},
	}
	cmd.Flags().StringVar(&o.Days, "keep-logs-days", "", `remove a run's logs and outputs this many days after it ended (0: not by age; "server": the server's)`)
	cmd.Flags().StringVar(&o.Pipes, "keep-pipelines", "", `keep the logs and outputs of this many newest pipelines of each branch (0: not by count; "server": the server's)`)
	return cmd
}

func (o *repoSetRetentionOptions) complete(_ context.Context, _ *session, args []string) error {
	o.repo = args[0]
	return nil
}

// validate refuses a repository or a rule the server would refuse, and a
// call that sets nothing.
func (o *repoSetRetentionOptions) validate() error {
	if err := api.CheckRepo(o.repo); err != nil {
		return usageErrorf("%v", err)
	}
	if !o.DaysSet && !o.PipesSet {
		return usageErrorf("nothing to set: give --keep-logs-days N, --keep-pipelines N, or both (see knotless repo set-retention --help)")
	}
	o.in = api.SetRetentionInput{Repo: o.repo}
	var err error
	if o.DaysSet {
		if o.in.KeepLogsDays, err = ruleArg("--keep-logs-days", o.Days); err != nil {
			return err
		}
	}
	if o.PipesSet {
		if o.in.KeepPipelines, err = ruleArg("--keep-pipelines", o.Pipes); err != nil {
			return err
		}
	}
	return nil
}

// ruleArg reads a rule's flag: a number >= 0, or "server" (-1 on the wire).
func ruleArg(flag, v string) (*int, error) {
	if v == "server" {
		n := -1
		return &n, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return nil, usageErrorf(`%s %q: want a number >= 0 (0: no limit by this rule) or "server"`, flag, v)
	}
	return &n, nil
}

func (o *repoSetRetentionOptions) run(ctx context.Context, s *session) error {
	var out api.Retention
	if err := s.procedure(ctx, api.MethodSetRetention, o.in, &out); err != nil {
		return fmt.Errorf("set the retention of %s: %w", o.repo, err)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), out)
	}
	fmt.Fprintln(s.stdout(), retentionText(out))
	return nil
}
