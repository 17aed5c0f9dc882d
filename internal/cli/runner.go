package cli

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
)

func (s *session) runnerCmd() *cobra.Command {
	cmd := group("runner", "List, approve and remove a repository's runners", `Manage the runners of a repository. A runner registers itself with
`+"`knotless-run login`"+` and stays pending until the repository's owner or an
admin approves it; only approved runners claim runs.`)

	var listRepo string
	list := &cobra.Command{
		Use:   "list --repo R",
		Short: "List a repository's runners, pending and approved",
		Example: `  knotless runner list --repo alice/app
  knotless runner list --repo alice/app --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := s.repoArg(cmd.Context(), listRepo, true)
			if err != nil {
				return err
			}
			var out api.ListRunnersOutput
			if err := s.query(cmd.Context(), api.MethodListRunners, url.Values{"repo": {r}}, &out); err != nil {
				return fmt.Errorf("list runners of %s: %w", r, err)
			}
			if out.Runners == nil {
				out.Runners = []api.Runner{}
			}
			if s.jsonOut {
				return writeJSON(s.stdout(), out)
			}
			if len(out.Runners) == 0 {
				fmt.Fprintf(s.stdout(), "No runners for %s: register one with knotless-run login --server %s --repo %s --name NAME.\n", r, orURL(s.server), r)
				return nil
			}
			now := s.now()
			t := newTable(s.stdout(), "NAME", "STATUS", "LABELS", "LAST SEEN", "REGISTERED", "DID")
			for _, rn := range out.Runners {
				t.row(rn.Name, rn.Status, strings.Join(rn.Labels, ","), agoPtr(rn.LastSeenAt, now), ago(rn.CreatedAt, now), rn.DID)
			}
			return t.flush()
		},
	}
	s.addRepoFlag(list, &listRepo)
	cmd.AddCommand(list)

	var approveRepo string
	approve := &cobra.Command{
		Use:   "approve NAME --repo R",
		Short: "Approve a pending runner so it may claim runs",
		Long: `Approve a runner registered for a repository (owner or admin). Check its DID
against what ` + "`knotless-run login`" + ` printed on the runner's machine first.`,
		Example: `  knotless runner approve build-1 --repo alice/app`,
		Args:    exactArgs(1, "one runner NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := s.repoArg(cmd.Context(), approveRepo, true)
			if err != nil {
				return err
			}
			var out api.Runner
			if err := s.procedure(cmd.Context(), api.MethodApproveRunner, api.RunnerRef{Repo: r, Name: args[0]}, &out); err != nil {
				return fmt.Errorf("approve runner %s of %s: %w", args[0], r, err)
			}
			if s.jsonOut {
				return writeJSON(s.stdout(), out)
			}
			fmt.Fprintf(s.stdout(), "Approved runner %s of %s (%s, labels %s).\n", out.Name, r, out.DID, orNone(strings.Join(out.Labels, ",")))
			return nil
		},
	}
	s.addRepoFlag(approve, &approveRepo)
	cmd.AddCommand(approve)

	var removeRepo string
	remove := &cobra.Command{
		Use:     "remove NAME --repo R",
		Aliases: []string{"rm"},
		Short:   "Remove a runner; it can no longer claim runs",
		Example: `  knotless runner remove build-1 --repo alice/app`,
		Args:    exactArgs(1, "one runner NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := s.repoArg(cmd.Context(), removeRepo, true)
			if err != nil {
				return err
			}
			ref := api.RunnerRef{Repo: r, Name: args[0]}
			if err := s.procedure(cmd.Context(), api.MethodRemoveRunner, ref, nil); err != nil {
				return fmt.Errorf("remove runner %s of %s: %w", args[0], r, err)
			}
			if s.jsonOut {
				return writeJSON(s.stdout(), ref)
			}
			fmt.Fprintf(s.stdout(), "Removed runner %s of %s.\n", args[0], r)
			return nil
		},
	}
	s.addRepoFlag(remove, &removeRepo)
	cmd.AddCommand(remove)
	return cmd
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
