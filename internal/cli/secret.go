package cli

import (
	"fmt"
	"net/url"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/logmask"
)

func (s *session) secretCmd() *cobra.Command {
	cmd := group("secret", "Set, list and remove a repository's secrets", `Manage a repository's secrets. Values are write-only: the server stores them
encrypted and never shows them again; a run receives only the secrets its
workflow lists, and a step only those it asks for. --runner NAME scopes a
secret to one runner of the repository (it wins over an unscoped secret of
the same name for that runner).`)

	var repo, runner string
	set := &cobra.Command{
		Use:   "set NAME --repo R [--runner NAME]",
		Short: "Set a secret; the value is read from stdin or a prompt",
		Long: `Set (create or replace) a secret of a repository.

The value is read from stdin when stdin is not a terminal (exactly one
trailing newline is removed, nothing else), else from a prompt that does not
echo, asked twice. It is never taken from a command-line argument. The step
receives exactly these bytes, valid UTF-8 or not. An empty value is refused,
and so is a value holding a NUL byte (an environment variable cannot hold
one, so no step could receive it). Runners mask secret values in logs, but not values shorter
than 4 bytes (or only white space): set warns about those.`,
		Example: `  knotless secret set DEPLOY_KEY --repo alice/app < deploy_key
  printf '%s' "$TOKEN" | knotless secret set CODECOV_TOKEN --repo alice/app
  knotless secret set PROD_PASSWORD --repo alice/app --runner prod-k8s   # asks twice`,
		Args: exactArgs(1, "one secret NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := s.repoArg(cmd.Context(), repo, true)
			if err != nil {
				return err
			}
			if _, err := s.api(); err != nil {
				return err // before asking for a value that cannot be sent
			}
			v, err := s.readSecretValue(args[0])
			if err != nil {
				return err
			}
			if err := api.CheckSecretValue(args[0], v); err != nil {
				return failf("%v: secret %s not set", err, args[0])
			}
			if logmask.TooShort(string(v)) {
				s.warn(fmt.Sprintf("warning: the value of %s is shorter than %d bytes (or only white space): runners cannot mask it, so it shows in logs as is", args[0], logmask.MinSecretLen))
			}
			in := api.NewSetSecretInput(r, args[0], runner, v)
			if err := s.procedure(cmd.Context(), api.MethodSetSecret, in, nil); err != nil {
				return fmt.Errorf("set secret %s of %s: %w", args[0], r, err)
			}
			if s.jsonOut {
				// The server answers set with nothing: print its listing of it.
				var out api.ListSecretsOutput
				if err := s.query(cmd.Context(), api.MethodListSecrets, url.Values{"repo": {r}}, &out); err != nil {
					return fmt.Errorf("list secrets of %s: %w", r, err)
				}
				for _, sec := range out.Secrets {
					if sec.Name == args[0] && sec.Runner == runner {
						return writeJSON(s.stdout(), sec)
					}
				}
				return fmt.Errorf("secret %s of %s was set but is not listed", args[0], r)
			}
			fmt.Fprintf(s.stdout(), "Set secret %s of %s%s (%d bytes).\n", args[0], r, scopeNote(runner), len(v))
			return nil
		},
	}
	s.addRepoFlag(set, &repo)
	set.Flags().StringVar(&runner, "runner", "", "scope the secret to this runner of the repository")
	cmd.AddCommand(set)

	var listRepo string
	list := &cobra.Command{
		Use:   "list --repo R",
		Short: "List a repository's secrets (names only)",
		Long:  `List the names of a repository's secrets, their runner scope and when they last changed. Values are never shown.`,
		Example: `  knotless secret list --repo alice/app
  KNOTLESS_REPO=alice/app knotless secret list --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := s.repoArg(cmd.Context(), listRepo, true)
			if err != nil {
				return err
			}
			var out api.ListSecretsOutput
			if err := s.query(cmd.Context(), api.MethodListSecrets, url.Values{"repo": {r}}, &out); err != nil {
				return fmt.Errorf("list secrets of %s: %w", r, err)
			}
			if out.Secrets == nil {
				out.Secrets = []api.Secret{}
			}
			if s.jsonOut {
				return writeJSON(s.stdout(), out)
			}
			if len(out.Secrets) == 0 {
				fmt.Fprintf(s.stdout(), "No secrets in %s: set one with knotless secret set NAME --repo %s.\n", r, r)
				return nil
			}
			now := s.now()
			t := newTable(s.stdout(), "NAME", "RUNNER", "UPDATED")
			for _, sec := range out.Secrets {
				runner := sec.Runner
				if runner == "" {
					runner = "(any)"
				}
				t.row(sec.Name, runner, ago(sec.UpdatedAt, now))
			}
			return t.flush()
		},
	}
	s.addRepoFlag(list, &listRepo)
	cmd.AddCommand(list)

	var rmRepo, rmRunner string
	rm := &cobra.Command{
		Use:     "rm NAME --repo R [--runner NAME]",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove a secret",
		Long: `Remove a secret of a repository. With --runner, removes the secret scoped to
that runner; without it, the unscoped one.`,
		Example: `  knotless secret rm DEPLOY_KEY --repo alice/app
  knotless secret rm PROD_PASSWORD --repo alice/app --runner prod-k8s`,
		Args: exactArgs(1, "one secret NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := s.repoArg(cmd.Context(), rmRepo, true)
			if err != nil {
				return err
			}
			in := api.DeleteSecretInput{Repo: r, Name: args[0], Runner: rmRunner}
			if err := s.procedure(cmd.Context(), api.MethodDeleteSecret, in, nil); err != nil {
				return fmt.Errorf("remove secret %s of %s%s: %w", args[0], r, scopeNote(rmRunner), err)
			}
			if s.jsonOut {
				return writeJSON(s.stdout(), in)
			}
			fmt.Fprintf(s.stdout(), "Removed secret %s of %s%s.\n", args[0], r, scopeNote(rmRunner))
			return nil
		},
	}
	s.addRepoFlag(rm, &rmRepo)
	rm.Flags().StringVar(&rmRunner, "runner", "", "remove the secret scoped to this runner")
	cmd.AddCommand(rm)
	return cmd
}

func scopeNote(runner string) string {
	if runner == "" {
		return ""
	}
	return " for runner " + runner
}
