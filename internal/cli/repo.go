package cli

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
)

// addRepoFlag adds --repo, defaulting to $KNOTLESS_REPO.
func (s *session) addRepoFlag(cmd *cobra.Command, repo *string) {
	cmd.Flags().StringVarP(repo, "repo", "R", "", "repository OWNER/NAME, or NAME for one of yours (default $"+EnvRepo+")")
}

// repoArg resolves --repo: the flag, else $KNOTLESS_REPO; a bare NAME gets
// the caller's handle as owner. required makes a missing value a usage error;
// otherwise "" is returned.
func (s *session) repoArg(ctx context.Context, flag string, required bool) (string, error) {
	r := strings.TrimSpace(flag)
	if r == "" {
		r = strings.TrimSpace(s.getenv(EnvRepo))
	}
	if r == "" {
		if required {
			return "", usageErrorf("no repository: give --repo OWNER/NAME or set %s", EnvRepo)
		}
		return "", nil
	}
	if !strings.Contains(r, "/") {
		if err := api.CheckName("repository name", r); err != nil {
			return "", usageErrorf("%v", err)
		}
		acct, err := s.whoami(ctx)
		if err != nil {
			return "", fmt.Errorf("find the owner of repository %q: %w", r, err)
		}
		s.repo = acct.Handle + "/" + r
		return s.repo, nil
	}
	if err := api.CheckRepo(r); err != nil {
		return "", usageErrorf("%v", err)
	}
	s.repo = r
	return r, nil
}

// cloneURL makes a repository's clone URL absolute against the server URL.
func (s *session) cloneURL(r api.Repo) string {
	u := r.CloneURL
	if u == "" {
		u = "/" + r.FullName() + ".git"
	}
	if strings.HasPrefix(u, "/") && s.server != "" {
		if base, err := url.Parse(s.server); err == nil {
			if ref, err := url.Parse(u); err == nil {
				return base.ResolveReference(ref).String()
			}
		}
	}
	return u
}

func (s *session) repoCmd() *cobra.Command {
	cmd := group("repo", "Create, list and look after repositories", `Create and list repositories, show what one uses (logs, outputs, caches) and
set how long its runs keep their logs and outputs. A repository is OWNER/NAME
and is served over git smart HTTP; pushing to it runs its workflows
(.knotless/workflows/).`)
	cmd.AddCommand(s.repoCreateCmd(), s.repoListCmd(), s.repoUsageCmd(), s.repoSetRetentionCmd())
	return cmd
}

// repoCreateOptions is `knotless repo create NAME|OWNER/NAME`.
type repoCreateOptions struct {
	repo string // NAME or OWNER/NAME as given
}

func (s *session) repoCreateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "create NAME|OWNER/NAME",
		Short: "Create a repository and show how to push to it",
		Long: `Create a repository. NAME makes it yours; OWNER/NAME is for admins (or your
own handle as OWNER). Prints its clone URL and how to push an existing
checkout to it.`,
		Example: `  knotless repo create app
  knotless repo create alice/app
  knotless repo create app --json`,
		Args: exactArgs(1, "one NAME or OWNER/NAME"),
		RunE: s.runE(&repoCreateOptions{}),
	}
}

func (o *repoCreateOptions) complete(_ context.Context, _ *session, args []string) error {
	o.repo = args[0]
	return nil
}

// validate refuses a NAME or OWNER/NAME the server would refuse (a usage
// error).
func (o *repoCreateOptions) validate() error {
	check := api.CheckRepo
	if !strings.Contains(o.repo, "/") {
		check = func(n string) error { return api.CheckName("repository name", n) }
	}
	if err := check(o.repo); err != nil {
		return usageErrorf("%v", err)
	}
	return nil
}

func (o *repoCreateOptions) run(ctx context.Context, s *session) error {
	var r api.Repo
	if err := s.procedure(ctx, api.MethodCreateRepo, api.CreateRepoInput{Repo: o.repo}, &r); err != nil {
		return fmt.Errorf("create repository %s: %w", o.repo, err)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), r)
	}
	u := s.cloneURL(r)
	fmt.Fprintf(s.stdout(), `Created repository %s.
Clone URL: %s

Push an existing checkout (git asks for a password: give your API token,
any user name):
  git remote add knotless %s
  git push knotless HEAD:refs/heads/main

Then follow its pipeline:
  knotless run logs --repo %s --latest -f
`, r.FullName(), u, u, r.FullName())
	return nil
}

// repoListOptions is `knotless repo list`: it has no flags of its own.
type repoListOptions struct{}

func (s *session) repoListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the repositories you own (admins: all)",
		Long:  `List the repositories you own; admins see every repository.`,
		Example: `  knotless repo list
  knotless repo list --json | jq -r '.repos[].cloneUrl'`,
		Args: noArgs,
		RunE: s.runE(&repoListOptions{}),
	}
}

func (o *repoListOptions) complete(context.Context, *session, []string) error { return nil }

func (o *repoListOptions) validate() error { return nil }

func (o *repoListOptions) run(ctx context.Context, s *session) error {
	var out api.ListReposOutput
	if err := s.query(ctx, api.MethodListRepos, nil, &out); err != nil {
		return fmt.Errorf("list repositories: %w", err)
	}
	if out.Repos == nil {
		out.Repos = []api.Repo{}
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), out)
	}
	if len(out.Repos) == 0 {
		fmt.Fprintln(s.stdout(), "No repositories yet: create one with knotless repo create NAME.")
		return nil
	}
	now := s.now()
	t := newTable(s.stdout(), "REPO", "CLONE URL", "CREATED")
	for _, r := range out.Repos {
		t.row(r.FullName(), s.cloneURL(r), ago(r.CreatedAt, now))
	}
	return t.flush()
}
