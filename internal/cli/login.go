package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
)

// loginOptions is `knotless login`. The token is read in run, after the
// server URL is checked, as the command always did: it is never a flag's
// value (TokenFile names a file).
type loginOptions struct {
	Server    string // --server, else $KNOTLESS_SERVER
	TokenFile string // --token-file: "" for stdin or a prompt
	server    string // the URL without trailing slashes
	from      string // where the URL came from, for errors: "" for --server
}

func (s *session) loginCmd() *cobra.Command {
	o := &loginOptions{}
	cmd := &cobra.Command{
		Use:   "login --server URL [--token-file FILE]",
		Short: "Save the server URL and your API token after checking them",
		Long: `Log in to a Knotless server: check the API token with the server, then save
the server URL and the token to the config file (mode 0600).

The token is read from --token-file, else from stdin when stdin is not a
terminal, else from a prompt that does not echo. It is never taken from a
command-line argument (those are visible to every user of the machine).

The first admin token of a new server is in DATA/admin.token; other
accounts get theirs from ` + "`knotless account create`" + `.`,
		Example: `  knotless login --server https://ci.example.com --token-file ~/knotless.token
  knotless login --server http://127.0.0.1:8080 < /var/lib/knotless/admin.token
  knotless login --server https://ci.example.com          # asks for the token`,
		Args: noArgs,
		RunE: s.runE(o),
	}
	cmd.Flags().StringVar(&o.Server, "server", "", "server URL, e.g. https://ci.example.com (default $"+EnvServer+")")
	cmd.Flags().StringVar(&o.TokenFile, "token-file", "", "read the API token from this file (default: stdin, or a prompt on a terminal)")
	return cmd
}

func (o *loginOptions) complete(_ context.Context, s *session, _ []string) error {
	o.server, o.from = o.Server, ""
	if o.server == "" {
		o.server, o.from = s.getenv(EnvServer), " (server URL from "+EnvServer+")"
	}
	o.server = strings.TrimRight(strings.TrimSpace(o.server), "/")
	return nil
}

// validate refuses a missing or malformed server URL (usage errors).
func (o *loginOptions) validate() error {
	if o.server == "" {
		return usageErrorf("login needs --server URL, e.g. knotless login --server https://ci.example.com")
	}
	if err := api.CheckServerURL(o.server); err != nil {
		return usageErrorf("%v%s", err, o.from)
	}
	return nil
}

// run reads the token, checks it with the server (whoami) and only then
// saves the config.
func (o *loginOptions) run(ctx context.Context, s *session) error {
	path, err := s.configPath()
	if err != nil {
		return err
	}
	tok, err := s.readToken(o.TokenFile)
	if err != nil {
		return err
	}
	s.client = s.newClient(o.server, tok)
	s.loggingIn = true
	acct, err := s.whoami(ctx)
	if err != nil {
		return fmt.Errorf("log in to %s: %w", o.server, err)
	}
	if err := SaveConfig(path, Config{Server: o.server, Token: tok}); err != nil {
		return err
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), acct)
	}
	fmt.Fprintf(s.stdout(), "Logged in to %s as %s%s.\nSaved to %s.\n", o.server, acct.Handle, adminNote(acct), path)
	return nil
}

func adminNote(a api.Account) string {
	if a.Admin {
		return " (admin)"
	}
	return ""
}

func (s *session) whoami(ctx context.Context) (api.Account, error) {
	var acct api.Account
	err := s.query(ctx, api.MethodWhoAmI, nil, &acct)
	return acct, err
}

// whoamiOptions is `knotless whoami`: it has no flags of its own.
type whoamiOptions struct{}

func (s *session) whoamiCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show the account your token belongs to",
		Long: `Show the handle, DID and role of the account the configured token belongs
to, and the server it is for. Use it to check a login or the KNOTLESS_SERVER
and KNOTLESS_TOKEN variables.`,
		Example: `  knotless whoami
  knotless whoami --json`,
		Args: noArgs,
		RunE: s.runE(&whoamiOptions{}),
	}
}

func (o *whoamiOptions) complete(context.Context, *session, []string) error { return nil }

func (o *whoamiOptions) validate() error { return nil }

func (o *whoamiOptions) run(ctx context.Context, s *session) error {
	acct, err := s.whoami(ctx)
	if err != nil {
		return fmt.Errorf("whoami: %w", err)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), acct)
	}
	fmt.Fprintf(s.stdout(), "%s%s\nDID:    %s\nserver: %s\n", acct.Handle, adminNote(acct), acct.DID, s.server)
	return nil
}

func (s *session) accountCmd() *cobra.Command {
	cmd := group("account", "Manage accounts (admins)", `Manage the server's accounts. Only admins may create, disable and enable
accounts. Your own API tokens are managed with knotless token.`)
	cmd.AddCommand(s.accountCreateCmd(), s.accountToggleCmd(true), s.accountToggleCmd(false))
	return cmd
}

// accountCreateOptions is `knotless account create HANDLE`.
type accountCreateOptions struct {
	Admin  bool   // --admin
	DID    string // --did: "" for one the server makes
	handle string
}

func (s *session) accountCreateCmd() *cobra.Command {
	o := &accountCreateOptions{}
	create := &cobra.Command{
		Use:   "create HANDLE [--admin] [--did DID]",
		Short: "Create an account and print its API token once",
		Long: `Create an account (admins only) and print its new API token. The token is
shown this one time and stored hashed by the server: hand it to the person
over a safe channel; they log in with it (` + "`knotless login`" + `).

Without --did the server makes a did:key for the account.`,
		Example: `  knotless account create bob
  knotless account create carol --admin
  knotless account create dave --json | jq -r .token > dave.token`,
		Args: exactArgs(1, "one HANDLE"),
		RunE: s.runE(o),
	}
	create.Flags().BoolVar(&o.Admin, "admin", false, "make the account an admin (may create accounts, sees every repository)")
	create.Flags().StringVar(&o.DID, "did", "", "the account's DID (default: the server makes a did:key)")
	return create
}

func (o *accountCreateOptions) complete(_ context.Context, _ *session, args []string) error {
	o.handle = args[0]
	return nil
}

// validate refuses what is not a handle (a usage error).
func (o *accountCreateOptions) validate() error {
	if err := api.CheckHandle(o.handle); err != nil {
		return usageErrorf("%v", err)
	}
	return nil
}

func (o *accountCreateOptions) run(ctx context.Context, s *session) error {
	var out api.CreateAccountOutput
	in := api.CreateAccountInput{Handle: o.handle, DID: o.DID, Admin: o.Admin}
	if err := s.procedure(ctx, api.MethodCreateAccount, in, &out); err != nil {
		return fmt.Errorf("create account %s: %w", o.handle, err)
	}
	if s.jsonOut {
		return writeJSON(s.stdout(), out)
	}
	w := s.stdout()
	fmt.Fprintf(w, "Created account %s%s (%s).\n", out.Account.Handle, adminNote(out.Account), out.Account.DID)
	fmt.Fprintf(w, "API token (shown only this once):\n\n  %s\n\n", out.Token)
	fmt.Fprintf(w, "They log in with: knotless login --server %s --token-file FILE\n", s.server)
	return nil
}
