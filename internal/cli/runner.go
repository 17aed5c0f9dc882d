package cli

import (
	"context"
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
	cmd.AddCommand(s.runnerListCmd(), s.runnerTokenCmd(), s.runnerApproveCmd(), s.runnerRemoveCmd())
	return cmd
}

// runnerListOptions is `knotless runner list`: the flags as given (Repo,
// Cursor, Limit) and the repository they name, once completed.
type runnerListOptions struct {
	Repo   string // --repo
	Cursor string // --cursor
	Limit  int    // --limit
	repo   string // OWNER/NAME
}

func (s *session) runnerListCmd() *cobra.Command {
	o := &runnerListOptions{}
	c := &cobra.Command{
		Use:   "list --repo R [--limit N] [--cursor C]",
		Short: "List a repository's runners, pending and approved",
		Long: `List the runners registered for a repository: name, status (pending or
approved), labels, when each was last seen and registered, and its DID,
shortened in the table (the start and the end; --json shows it whole).`,
		Example: `  knotless runner list --repo alice/app
  knotless runner list --repo alice/app --json`,
		Args: noArgs,
		RunE: s.runE(o),
	}
	s.addRepoFlag(c, &o.Repo)
	c.Flags().IntVarP(&o.Limit, "limit", "n", 0, "at most this many runners (0: the server's default)")
	c.Flags().StringVar(&o.Cursor, "cursor", "", "the page of runners a previous list pointed to")
	return c
}

func (o *runnerListOptions) complete(ctx context.Context, s *session, _ []string) (err error) {
	o.repo, err = s.repoArg(ctx, o.Repo, true)
	return err
}

func (o *runnerListOptions) validate() error { return nil }

func (o *runnerListOptions) run(ctx context.Context, s *session) error {
	p := url.Values{"repo": {o.repo}}
	if o.Cursor != "" {
		p.Set("cursor", o.Cursor)
	}
	if o.Limit > 0 {
		p.Set("limit", strconv.Itoa(o.Limit))
	}
	var out api.ListRunnersOutput
	if err := s.query(ctx, api.MethodListRunners, p, &out); err != nil {
		return fmt.Errorf("list runners of %s: %w", o.repo, err)
	}
	if out.Runners == nil {
		out.Runners = []api.Runner{}
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), out)
	}
	if len(out.Runners) == 0 {
		fmt.Fprintf(s.stdout(), "No runners for %s: register one with knotless-run login --server %s --repo %s --name NAME.\n", o.repo, orURL(s.server), o.repo)
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
}

// runnerTokenOptions is `knotless runner token`: a registration token for
// Repo that lasts Expires and allows Uses registrations.
type runnerTokenOptions struct {
	Repo    string        // --repo
	Expires time.Duration // --expires, at least 1s
	Uses    int           // --uses, at least 1
	repo    string        // OWNER/NAME
}

func (s *session) runnerTokenCmd() *cobra.Command {
	o := &runnerTokenOptions{}
	c := &cobra.Command{
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
		RunE: s.runE(o),
	}
	s.addRepoFlag(c, &o.Repo)
	c.Flags().DurationVar(&o.Expires, "expires", time.Hour, "how long the token lasts (at most 168h)")
	c.Flags().IntVar(&o.Uses, "uses", 1, "how many runners may register with it (at most 1000)")
	return c
}

func (o *runnerTokenOptions) complete(ctx context.Context, s *session, _ []string) (err error) {
	o.repo, err = s.repoArg(ctx, o.Repo, true)
	return err
}

// validate refuses --expires under a second and --uses under one (usage
// errors); the upper bounds are the server's.
func (o *runnerTokenOptions) validate() error {
	if o.Expires < time.Second {
		return usageErrorf("--expires %s: want at least 1s (e.g. 1h)", o.Expires)
	}
	if o.Uses < 1 {
		return usageErrorf("--uses %d: want at least 1", o.Uses)
	}
	return nil
}

func (o *runnerTokenOptions) run(ctx context.Context, s *session) error {
	in := api.CreateRegistrationTokenInput{Repo: o.repo, ExpiresIn: int64(o.Expires / time.Second), Uses: o.Uses}
	var out api.RegistrationToken
	if err := s.procedure(ctx, api.MethodCreateRegistrationToken, in, &out); err != nil {
		return fmt.Errorf("make a registration token for %s: %w", o.repo, err)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), out)
	}
	fmt.Fprintln(s.stdout(), out.Token)
	fmt.Fprintf(s.stderr(), "Registration token for %s: %d use(s), expires %s. On the runner's machine:\n  KNOTLESS_REGISTRATION_TOKEN=... knotless-run login --server %s --repo %s --name NAME --state FILE\n",
		out.Repo, out.Uses, out.ExpiresAt.Local().Format(time.RFC3339), orURL(s.server), out.Repo)
	return nil
}

// runnerApproveOptions is `knotless runner approve NAME`. DIDGiven says
// --did was given at all, so that a blank or malformed one is refused
// rather than taken for "no check".
type runnerApproveOptions struct {
	Repo     string // --repo
	DID      string // --did
	DIDGiven bool
	name     string // the runner's NAME
	repo     string // OWNER/NAME
	did      string // DID without surrounding space
}

func (s *session) runnerApproveCmd() *cobra.Command {
	o := &runnerApproveOptions{}
	c := &cobra.Command{
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
			o.DIDGiven = cmd.Flags().Changed("did")
			return execute(cmd.Context(), s, o, args)
		},
	}
	s.addRepoFlag(c, &o.Repo)
	c.Flags().StringVar(&o.DID, "did", "", "approve only if the runner's DID is this one (as knotless-run login printed it)")
	return c
}

func (o *runnerApproveOptions) complete(ctx context.Context, s *session, args []string) (err error) {
	o.name = args[0]
	o.did = strings.TrimSpace(o.DID)
	o.repo, err = s.repoArg(ctx, o.Repo, true)
	return err
}

// validate refuses a --did that is not a DID (a usage error).
func (o *runnerApproveOptions) validate() error {
	if o.DIDGiven && !strings.HasPrefix(o.did, "did:") {
		return usageErrorf("--did %q: want the runner's DID as knotless-run login printed it (did:key:...)", o.DID)
	}
	return nil
}

func (o *runnerApproveOptions) run(ctx context.Context, s *session) error {
	var out api.Runner
	ref := api.RunnerRef{Repo: o.repo, Name: o.name, DID: o.did}
	if err := s.procedure(ctx, api.MethodApproveRunner, ref, &out); err != nil {
		return fmt.Errorf("approve runner %s of %s: %w", o.name, o.repo, err)
	}
	if o.did != "" && out.DID != "" && out.DID != o.did {
		// A server that predates --did ignores it: say so rather
		// than claim a check that did not happen.
		return failf("approved runner %s of %s, but its DID is %s, not %s: remove it at once (knotless runner remove %s --repo %s)",
			o.name, o.repo, out.DID, o.did, o.name, o.repo)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), out)
	}
	fmt.Fprintf(s.stdout(), "Approved runner %s of %s (%s, labels %s).\n", out.Name, o.repo, out.DID, orNone(strings.Join(out.Labels, ",")))
	return nil
}

// runnerRemoveOptions is `knotless runner remove NAME`.
type runnerRemoveOptions struct {
	Repo string // --repo
	name string // the runner's NAME
	repo string // OWNER/NAME
}

func (s *session) runnerRemoveCmd() *cobra.Command {
	o := &runnerRemoveOptions{}
	c := &cobra.Command{
		Use:     "remove NAME --repo R",
		Aliases: []string{"rm"},
		Short:   "Remove a runner; it can no longer claim runs",
		Example: `  knotless runner remove build-1 --repo alice/app`,
		Args:    exactArgs(1, "one runner NAME"),
		RunE:    s.runE(o),
	}
	s.addRepoFlag(c, &o.Repo)
	return c
}

func (o *runnerRemoveOptions) complete(ctx context.Context, s *session, args []string) (err error) {
	o.name = args[0]
	o.repo, err = s.repoArg(ctx, o.Repo, true)
	return err
}

func (o *runnerRemoveOptions) validate() error { return nil }

func (o *runnerRemoveOptions) run(ctx context.Context, s *session) error {
	ref := api.RunnerRef{Repo: o.repo, Name: o.name}
	if err := s.procedure(ctx, api.MethodRemoveRunner, ref, nil); err != nil {
		return fmt.Errorf("remove runner %s of %s: %w", o.name, o.repo, err)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), ref)
	}
	fmt.Fprintf(s.stdout(), "Removed runner %s of %s.\n", o.name, o.repo)
	return nil
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
