package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
)

// parseExpiry reads --expires: a number of days ("30d"), weeks ("2w") or a
// Go duration ("12h", "90m").
func parseExpiry(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	mult := time.Duration(0)
	switch {
	case strings.HasSuffix(v, "d"):
		mult = 24 * time.Hour
	case strings.HasSuffix(v, "w"):
		mult = 7 * 24 * time.Hour
	}
	var d time.Duration
	if mult != 0 {
		n, err := strconv.Atoi(v[:len(v)-1])
		if err != nil || n <= 0 || time.Duration(n) > 3650*24*time.Hour/mult {
			return 0, fmt.Errorf("--expires %q: use a positive number of days (30d), weeks (2w) or a duration (12h)", v)
		}
		d = time.Duration(n) * mult
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 {
			return 0, fmt.Errorf("--expires %q: use a positive number of days (30d), weeks (2w) or a duration (12h)", v)
		}
	}
	return d, nil
}

func (s *session) tokenCmd() *cobra.Command {
	cmd := group("token", "Manage your API tokens: create, list, revoke",
		`Manage the API tokens of your account. Each token has a name, unique in
the account, and may expire. The server keeps only a hash of each token: a
token is shown once, when it is made. Revoking a token takes effect at once:
the next request with it is refused (HTTP 401), for the API and for git.

A leaked token: create a new one, log in with it, revoke the leaked one.
The token an account was created with is named "initial". The last token of
an account cannot be revoked (create another first); an admin can disable a
whole account instead (knotless account disable).`)
	cmd.AddCommand(s.tokenCreateCmd(), s.tokenListCmd(), s.tokenRevokeCmd())
	return cmd
}

// tokenCreateOptions is `knotless token create NAME`.
type tokenCreateOptions struct {
	Expires string // --expires as given (see parseExpiry); "": never
	name    string // the token's NAME
}

func (s *session) tokenCreateCmd() *cobra.Command {
	o := &tokenCreateOptions{}
	c := &cobra.Command{
		Use:   "create NAME [--expires 30d]",
		Short: "Make a new API token and print it once",
		Long: `Make a new API token for your account and print it to stdout, alone on its
line, so that a script can capture it; what to do with it goes to stderr.
It is shown this one time: keep it in a file of mode 0600 or a secret store.

--expires gives its lifetime: days (30d), weeks (2w) or a duration (12h);
without it the token lives until it is revoked.`,
		Example: `  knotless token create laptop --expires 90d > ~/.knotless-laptop.token
  knotless login --server https://ci.example.com --token-file ~/.knotless-laptop.token
  knotless token create deploy-bot --json | jq -r .secret`,
		Args: exactArgs(1, "one token NAME"),
		RunE: s.runE(o),
	}
	c.Flags().StringVar(&o.Expires, "expires", "", "lifetime: days (30d), weeks (2w) or a duration (12h); default: never expires")
	return c
}

func (o *tokenCreateOptions) complete(_ context.Context, _ *session, args []string) error {
	o.name = args[0]
	return nil
}

// validate refuses a name the server would refuse and an --expires
// parseExpiry cannot read (usage errors, in that order).
func (o *tokenCreateOptions) validate() error {
	if err := api.CheckName("token name", o.name); err != nil {
		return usageErrorf("%v", err)
	}
	if o.Expires != "" {
		if _, err := parseExpiry(o.Expires); err != nil {
			return usageErrorf("%v", err)
		}
	}
	return nil
}

func (o *tokenCreateOptions) run(ctx context.Context, s *session) error {
	in := api.CreateTokenInput{Name: o.name}
	if o.Expires != "" {
		d, err := parseExpiry(o.Expires)
		if err != nil {
			return usageErrorf("%v", err)
		}
		t := s.now().Add(d).UTC()
		in.ExpiresAt = &t
	}
	var out api.CreateTokenOutput
	if err := s.procedure(ctx, api.MethodCreateToken, in, &out); err != nil {
		return fmt.Errorf("create token %s: %w", o.name, err)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), out)
	}
	fmt.Fprintln(s.stdout(), out.Secret)
	until := "until it is revoked"
	if out.Token.ExpiresAt != nil {
		until = "until " + out.Token.ExpiresAt.Local().Format("2006-01-02 15:04 MST")
	}
	fmt.Fprintf(s.stderr(), "Created token %s, valid %s. It is shown only this once: keep it safe.\n"+
		"Log in with it: knotless login --server %s --token-file FILE\n", out.Token.Name, until, s.server)
	return nil
}

// tokenListOptions is `knotless token list`: it has no flags of its own.
type tokenListOptions struct{}

func (s *session) tokenListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List your API tokens (names, never the tokens)",
		Long: `List the API tokens of your account: name, when made, when they expire and
when they were last used (to the minute). The tokens themselves are never
shown. The token this command used is marked with *.`,
		Example: `  knotless token list
  knotless token list --json`,
		Args: noArgs,
		RunE: s.runE(&tokenListOptions{}),
	}
}

func (o *tokenListOptions) complete(context.Context, *session, []string) error { return nil }

func (o *tokenListOptions) validate() error { return nil }

func (o *tokenListOptions) run(ctx context.Context, s *session) error {
	var out api.ListTokensOutput
	if err := s.query(ctx, api.MethodListTokens, nil, &out); err != nil {
		return fmt.Errorf("list tokens: %w", err)
	}
	if out.Tokens == nil {
		out.Tokens = []api.Token{}
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), out)
	}
	now := s.now()
	t := newTable(s.stdout(), "NAME", "CREATED", "EXPIRES", "LAST USED")
	for _, tok := range out.Tokens {
		name := tok.Name
		if tok.Current {
			name += " *"
		}
		exp := "never"
		if tok.ExpiresAt != nil {
			exp = tok.ExpiresAt.Local().Format("2006-01-02 15:04")
			if !tok.ExpiresAt.After(now) {
				exp += " (expired)"
			}
		}
		used := agoPtr(tok.LastUsedAt, now)
		if used == "" {
			used = "never"
		}
		t.row(name, ago(tok.CreatedAt, now), exp, used)
	}
	return t.flush()
}

// tokenRevokeOptions is `knotless token revoke NAME`.
type tokenRevokeOptions struct {
	name string // the token's NAME
}

func (s *session) tokenRevokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "revoke NAME",
		Aliases: []string{"rm", "delete"},
		Short:   "Revoke one of your API tokens, at once",
		Long: `Revoke an API token of your account by name. From the next request on it is
refused (HTTP 401), by the API and by git. Revoking the token you are using
logs you out. The account's last token cannot be revoked: create another
first.`,
		Example: `  knotless token revoke laptop`,
		Args:    exactArgs(1, "one token NAME"),
		RunE:    s.runE(&tokenRevokeOptions{}),
	}
}

func (o *tokenRevokeOptions) complete(_ context.Context, _ *session, args []string) error {
	o.name = args[0]
	return nil
}

func (o *tokenRevokeOptions) validate() error { return nil }

func (o *tokenRevokeOptions) run(ctx context.Context, s *session) error {
	in := api.RevokeTokenInput{Name: o.name}
	if err := s.procedure(ctx, api.MethodRevokeToken, in, nil); err != nil {
		return fmt.Errorf("revoke token %s: %w", o.name, err)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), in)
	}
	fmt.Fprintf(s.stdout(), "Revoked token %s: it is refused from now on.\n", o.name)
	return nil
}

// accountToggleOptions is `knotless account disable HANDLE` (Disable) or
// `knotless account enable HANDLE`.
type accountToggleOptions struct {
	Disable bool
	handle  string
}

// verb is the subcommand's name and what its errors say it did.
func (o *accountToggleOptions) verb() (verb, nsid string) {
	if o.Disable {
		return "disable", api.MethodDisableAccount
	}
	return "enable", api.MethodEnableAccount
}

// accountToggleCmd is `account disable` or `account enable`.
func (s *session) accountToggleCmd(disable bool) *cobra.Command {
	o := &accountToggleOptions{Disable: disable}
	verb, _ := o.verb()
	short := "Enable a disabled account again (admins)"
	long := `Enable an account an admin disabled: its tokens work again (those not
revoked or expired meanwhile).`
	if disable {
		short = "Disable an account: its tokens are refused at once (admins)"
		long = `Disable an account (admins only): from the next request on, every token of
the account is refused (HTTP 401), by the API and by git. Its repositories,
runs, secrets and runners stay; admins still reach them. Undo with
knotless account enable. An admin cannot disable their own account.`
	}
	return &cobra.Command{
		Use:     verb + " HANDLE",
		Short:   short,
		Long:    long,
		Example: "  knotless account " + verb + " bob",
		Args:    exactArgs(1, "one HANDLE"),
		RunE:    s.runE(o),
	}
}

func (o *accountToggleOptions) complete(_ context.Context, _ *session, args []string) error {
	o.handle = args[0]
	return nil
}

// validate refuses what is not a handle (a usage error).
func (o *accountToggleOptions) validate() error {
	if err := api.CheckHandle(o.handle); err != nil {
		return usageErrorf("%v", err)
	}
	return nil
}

func (o *accountToggleOptions) run(ctx context.Context, s *session) error {
	verb, nsid := o.verb()
	var out api.Account
	if err := s.procedure(ctx, nsid, api.AccountRef{Handle: o.handle}, &out); err != nil {
		return fmt.Errorf("%s account %s: %w", verb, o.handle, err)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), out)
	}
	if out.Disabled {
		fmt.Fprintf(s.stdout(), "Disabled account %s: its tokens are refused from now on.\n", out.Handle)
	} else {
		fmt.Fprintf(s.stdout(), "Enabled account %s.\n", out.Handle)
	}
	return nil
}
