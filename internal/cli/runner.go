package cli

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
)

func (s *session) runnerCmd() *cobra.Command {
	cmd := group("runner", "Make registration tokens; list, approve and remove a repository's runners", `Manage the runners of a repository. A runner registers itself with
`+"`knotless-run login`"+`, with a registration token an owner made (knotless
runner token), and stays pending until the repository's owner or an
admin approves it; only approved runners claim runs.`)

	var listRepo, listCursor string
	var listLimit int
	list := &cobra.Command{
		Use:   "list --repo R [--limit N] [--cursor C]",
		Short: "List a repository's runners, pending and approved",
		Long: `List the runners registered for a repository: name, status (pending or
approved), labels, when each was last seen and registered, and its DID,
shortened in the table (the start and the end; --json shows it whole).`,
		Example: `  knotless runner list --repo alice/app
  knotless runner list --repo alice/app --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := s.repoArg(cmd.Context(), listRepo, true)
			if err != nil {
				return err
			}
			p := url.Values{"repo": {r}}
			if listCursor != "" {
				p.Set("cursor", listCursor)
			}
			if listLimit > 0 {
				p.Set("limit", strconv.Itoa(listLimit))
			}
			var out api.ListRunnersOutput
			if err := s.query(cmd.Context(), api.MethodListRunners, p, &out); err != nil {
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
				status := rn.Status
				if rn.HandoverUntil != nil {
					status += ", handing over (runs wait " + rn.HandoverUntil.Sub(now).Round(time.Second).String() + " for its next process)"
				}
				t.row(rn.Name, status, strings.Join(rn.Labels, ","), agoPtr(rn.LastSeenAt, now), ago(rn.CreatedAt, now), shortDID(rn.DID))
			}
			if err := t.flush(); err != nil {
				return err
			}
			if out.Cursor != "" {
				fmt.Fprintf(s.stderr(), "More runners: add --cursor %s\n", out.Cursor)
			}
			return nil
		},
	}
	s.addRepoFlag(list, &listRepo)
	list.Flags().IntVarP(&listLimit, "limit", "n", 0, "at most this many runners (0: the server's default)")
	list.Flags().StringVar(&listCursor, "cursor", "", "the page of runners a previous list pointed to")
	cmd.AddCommand(list)

	var tokenRepo string
	var tokenExpires time.Duration
	var tokenUses int
	token := &cobra.Command{
		Use:   "token --repo R [--expires 1h] [--uses 1]",
		Short: "Make a registration token: the right to register runners for a repository",
		Long: `Make a registration token for a repository (owner or admin) and print it.
` + "`knotless-run login --token TOKEN`" + ` (or KNOTLESS_REGISTRATION_TOKEN) registers
a runner with it; the server refuses registrations without one. A token
allows --uses registrations (default one) within --expires (default 1h, at
most 168h); the server keeps only its hash. The runner is then pending
until you approve it (knotless-run login prints the command).

The token is printed on stdout only: hand it to the runner's machine as a
secret (not on a command line others can read, not in a URL).`,
		Example: `  knotless runner token --repo alice/app
  knotless runner token --repo alice/app --expires 24h --uses 5 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := s.repoArg(cmd.Context(), tokenRepo, true)
			if err != nil {
				return err
			}
			if tokenExpires < time.Second {
				return usageErrorf("--expires %s: want at least 1s (e.g. 1h)", tokenExpires)
			}
			if tokenUses < 1 {
				return usageErrorf("--uses %d: want at least 1", tokenUses)
			}
			in := api.CreateRegistrationTokenInput{Repo: r, ExpiresIn: int64(tokenExpires / time.Second), Uses: tokenUses}
			var out api.RegistrationToken
			if err := s.procedure(cmd.Context(), api.MethodCreateRegistrationToken, in, &out); err != nil {
				return fmt.Errorf("make a registration token for %s: %w", r, err)
			}
			if s.jsonOut {
				return writeJSON(s.stdout(), out)
			}
			fmt.Fprintln(s.stdout(), out.Token)
			fmt.Fprintf(s.stderr(), "Registration token for %s: %d use(s), expires %s. On the runner's machine:\n  KNOTLESS_REGISTRATION_TOKEN=... knotless-run login --server %s --repo %s --name NAME --state FILE\n",
				out.Repo, out.Uses, out.ExpiresAt.Local().Format(time.RFC3339), orURL(s.server), out.Repo)
			return nil
		},
	}
	s.addRepoFlag(token, &tokenRepo)
	token.Flags().DurationVar(&tokenExpires, "expires", time.Hour, "how long the token lasts (at most 168h)")
	token.Flags().IntVar(&tokenUses, "uses", 1, "how many runners may register with it (at most 1000)")
	cmd.AddCommand(token)

	var approveRepo, approveDID string
	approve := &cobra.Command{
		Use:   "approve NAME --repo R [--did DID]",
		Short: "Approve a pending runner so it may claim runs",
		Long: `Approve a runner registered for a repository (owner or admin).

` + "`knotless-run login`" + ` prints the exact command to run, with --did: the DID
of the key pair it made on the runner's machine. With --did the server
approves the runner only if its registration has that DID, so a
registration someone else made under the same name is refused (exit 1,
conflict). Without --did, compare the DID this command prints with the one
login printed.`,
		Example: `  knotless runner approve build-1 --repo alice/app --did did:key:zDnaeTQ4...
  knotless runner approve build-1 --repo alice/app`,
		Args: exactArgs(1, "one runner NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := s.repoArg(cmd.Context(), approveRepo, true)
			if err != nil {
				return err
			}
			did := strings.TrimSpace(approveDID)
			if cmd.Flags().Changed("did") && !strings.HasPrefix(did, "did:") {
				return usageErrorf("--did %q: want the runner's DID as knotless-run login printed it (did:key:...)", approveDID)
			}
			var out api.Runner
			ref := api.RunnerRef{Repo: r, Name: args[0], DID: did}
			if err := s.procedure(cmd.Context(), api.MethodApproveRunner, ref, &out); err != nil {
				return fmt.Errorf("approve runner %s of %s: %w", args[0], r, err)
			}
			if did != "" && out.DID != "" && out.DID != did {
				// A server that predates --did ignores it: say so rather
				// than claim a check that did not happen.
				return failf("approved runner %s of %s, but its DID is %s, not %s: remove it at once (knotless runner remove %s --repo %s)",
					args[0], r, out.DID, did, args[0], r)
			}
			if s.jsonOut {
				return writeJSON(s.stdout(), out)
			}
			fmt.Fprintf(s.stdout(), "Approved runner %s of %s (%s, labels %s).\n", out.Name, r, out.DID, orNone(strings.Join(out.Labels, ",")))
			return nil
		},
	}
	s.addRepoFlag(approve, &approveRepo)
	approve.Flags().StringVar(&approveDID, "did", "", "approve only if the runner's DID is this one (as knotless-run login printed it)")
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

// shortDID shortens a DID for a table: "did:key:zDnaeTQ4…Xk9pQz" (the
// method, the first and the last 6 characters of the identifier).
func shortDID(did string) string {
	i := strings.LastIndexByte(did, ':')
	if i < 0 || len(did)-i-1 <= 16 {
		return did
	}
	id := did[i+1:]
	return did[:i+1] + id[:6] + "…" + id[len(id)-6:]
}
