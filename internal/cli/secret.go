package cli

import (
	"context"
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
	cmd.AddCommand(s.secretSetCmd(), s.secretListCmd(), s.secretRmCmd())
	return cmd
}

// secretSetOptions is `knotless secret set NAME`. complete reads the value
// (stdin or a prompt, see readSecretValue): it is never a flag.
type secretSetOptions struct {
	Repo   string // --repo
	Runner string // --runner: the runner the secret is scoped to, "" for any
	name   string // the secret's NAME
	repo   string // OWNER/NAME
	value  []byte
}

func (s *session) secretSetCmd() *cobra.Command {
	o := &secretSetOptions{}
	c := &cobra.Command{
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
		RunE: s.runE(o),
	}
	s.addRepoFlag(c, &o.Repo)
	c.Flags().StringVar(&o.Runner, "runner", "", "scope the secret to this runner of the repository")
	return c
}

// complete resolves the repository, makes sure there is a server to send
// the value to and only then reads the value.
func (o *secretSetOptions) complete(ctx context.Context, s *session, args []string) (err error) {
	o.name = args[0]
	if o.repo, err = s.repoArg(ctx, o.Repo, true); err != nil {
		return err
	}
	if _, err := s.api(); err != nil {
		return err // before asking for a value that cannot be sent
	}
	o.value, err = s.readSecretValue(o.name)
	return err
}

// validate refuses a value no step could receive (api.CheckSecretValue),
// as a failure (exit 1): the value was read, not mistyped as a flag.
func (o *secretSetOptions) validate() error {
	if err := api.CheckSecretValue(o.name, o.value); err != nil {
		return failf("%v: secret %s not set", err, o.name)
	}
	return nil
}

func (o *secretSetOptions) run(ctx context.Context, s *session) error {
	if logmask.TooShort(string(o.value)) {
		s.warn(fmt.Sprintf("warning: the value of %s is shorter than %d bytes (or only white space): runners cannot mask it, so it shows in logs as is", o.name, logmask.MinSecretLen))
	}
	in := api.NewSetSecretInput(o.repo, o.name, o.Runner, o.value)
	if err := s.procedure(ctx, api.MethodSetSecret, in, nil); err != nil {
		return fmt.Errorf("set secret %s of %s: %w", o.name, o.repo, err)
	}
	if s.jsonOut {
		// The server answers set with nothing: print its listing of it.
		var out api.ListSecretsOutput
		if err := s.query(ctx, api.MethodListSecrets, url.Values{"repo": {o.repo}}, &out); err != nil {
			return fmt.Errorf("list secrets of %s: %w", o.repo, err)
		}
		for _, sec := range out.Secrets {
			if sec.Name == o.name && sec.Runner == o.Runner {
				return writeJSON(s.stdout(), sec)
			}
		}
		return fmt.Errorf("secret %s of %s was set but is not listed", o.name, o.repo)
	}
	fmt.Fprintf(s.stdout(), "Set secret %s of %s%s (%d bytes).\n", o.name, o.repo, scopeNote(o.Runner), len(o.value))
	return nil
}

// secretListOptions is `knotless secret list`.
type secretListOptions struct {
	Repo string // --repo
	repo string // OWNER/NAME
}

func (s *session) secretListCmd() *cobra.Command {
	o := &secretListOptions{}
	c := &cobra.Command{
		Use:   "list --repo R",
		Short: "List a repository's secrets (names only)",
		Long:  `List the names of a repository's secrets, their runner scope and when they last changed. Values are never shown.`,
		Example: `  knotless secret list --repo alice/app
  KNOTLESS_REPO=alice/app knotless secret list --json`,
		Args: noArgs,
		RunE: s.runE(o),
	}
	s.addRepoFlag(c, &o.Repo)
	return c
}

func (o *secretListOptions) complete(ctx context.Context, s *session, _ []string) (err error) {
	o.repo, err = s.repoArg(ctx, o.Repo, true)
	return err
}

func (o *secretListOptions) validate() error { return nil }

func (o *secretListOptions) run(ctx context.Context, s *session) error {
	var out api.ListSecretsOutput
	if err := s.query(ctx, api.MethodListSecrets, url.Values{"repo": {o.repo}}, &out); err != nil {
		return fmt.Errorf("list secrets of %s: %w", o.repo, err)
	}
	if out.Secrets == nil {
		out.Secrets = []api.Secret{}
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), out)
	}
	if len(out.Secrets) == 0 {
		fmt.Fprintf(s.stdout(), "No secrets in %s: set one with knotless secret set NAME --repo %s.\n", o.repo, o.repo)
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
}

// secretRmOptions is `knotless secret rm NAME`.
type secretRmOptions struct {
	Repo   string // --repo
	Runner string // --runner: remove the secret scoped to it, "" the unscoped one
	name   string // the secret's NAME
	repo   string // OWNER/NAME
}

func (s *session) secretRmCmd() *cobra.Command {
	o := &secretRmOptions{}
	c := &cobra.Command{
		Use:     "rm NAME --repo R [--runner NAME]",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove a secret",
		Long: `Remove a secret of a repository. With --runner, removes the secret scoped to
that runner; without it, the unscoped one.`,
		Example: `  knotless secret rm DEPLOY_KEY --repo alice/app
  knotless secret rm PROD_PASSWORD --repo alice/app --runner prod-k8s`,
		Args: exactArgs(1, "one secret NAME"),
		RunE: s.runE(o),
	}
	s.addRepoFlag(c, &o.Repo)
	c.Flags().StringVar(&o.Runner, "runner", "", "remove the secret scoped to this runner")
	return c
}

func (o *secretRmOptions) complete(ctx context.Context, s *session, args []string) (err error) {
	o.name = args[0]
	o.repo, err = s.repoArg(ctx, o.Repo, true)
	return err
}

func (o *secretRmOptions) validate() error { return nil }

func (o *secretRmOptions) run(ctx context.Context, s *session) error {
	in := api.DeleteSecretInput{Repo: o.repo, Name: o.name, Runner: o.Runner}
	if err := s.procedure(ctx, api.MethodDeleteSecret, in, nil); err != nil {
		return fmt.Errorf("remove secret %s of %s%s: %w", o.name, o.repo, scopeNote(o.Runner), err)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), in)
	}
	fmt.Fprintf(s.stdout(), "Removed secret %s of %s%s.\n", o.name, o.repo, scopeNote(o.Runner))
	return nil
}

func scopeNote(runner string) string {
	if runner == "" {
		return ""
	}
	return " for runner " + runner
}
