package runnercli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/envflag"
	"knotless.dev/knotless/internal/runner"
)

func newLogin(g *globals, stdout io.Writer) *cobra.Command {
	var o runner.LoginOptions
	var labels string
	cmd := &cobra.Command{
		Use:   "login --server URL --repo OWNER/REPO --name NAME --state FILE --token TOKEN [--labels a,b]",
		Short: "Register this runner with a server and write its state file",
		Long: `login makes a new runner identity (a P-256 key pair; its DID is the key's did:key),
registers it with the server for one repository as pending, and writes the state
file (JSON, mode 0600, holding the private key: keep it out of job environments).
An owner of the repository must then approve the runner; login prints the
command, with the runner's DID so that only this registration is approved.

Registering takes a registration token an owner of the repository made with
knotless runner token --repo OWNER/REPO (short-lived, one use by default), or
an API token of an account that owns the repository. Give it with --token or,
better (command lines are visible to other users), KNOTLESS_REGISTRATION_TOKEN;
it is sent in a request header, never in a URL, and is not stored.

A server that answers 503 (busy: its database's writes kept colliding, or it
holds as many connections as it may) did nothing: login sends the registration
again, up to 5 times, waiting at least the answer's Retry-After.

A runner that was removed on the server logs in again with --force (a new
identity, approved anew).`,
		Example: `  knotless-run login --server https://ci.example.com --repo alice/app \
      --name builder-1 --labels linux,big --state /etc/knotless/runner.json
      # with KNOTLESS_REGISTRATION_TOKEN set to what knotless runner token --repo alice/app printed
  KNOTLESS_SERVER=http://127.0.0.1:8080 knotless-run login --repo alice/app --name dev --state runner.json
  knotless-run login --force --server https://ci.example.com --repo alice/app --name builder-1 --state runner.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Server == "" || o.Repo == "" || o.Name == "" || o.State == "" {
				return usagef("login needs --server, --repo, --name and --state")
			}
			if err := runner.CheckServerURL(strings.TrimRight(strings.TrimSpace(o.Server), "/")); err != nil {
				if !cmd.Flags().Changed("server") {
					return usagef("%v (server URL from KNOTLESS_SERVER)", err)
				}
				return err
			}
			if o.Token = strings.TrimSpace(o.Token); o.Token == "" {
				return usagef("login needs a registration token: an owner of %s makes one with knotless runner token --repo %s; give it with KNOTLESS_REGISTRATION_TOKEN (or --token)", o.Repo, o.Repo)
			}
			if labels != "" {
				o.Labels = strings.Split(labels, ",")
			}
			// The server's one rule, checked before a key is made.
			if err := api.CheckRunnerName("--name", o.Name); err != nil {
				return usagef("%v", err)
			}
			for _, l := range o.Labels {
				if err := api.CheckRunnerName("label", l); err != nil {
					return usagef("--labels: %v", err)
				}
			}
			st, err := runner.Login(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "Registered runner %s for %s (%s); it is pending approval.\n", st.Name, st.Repo, st.DID)
			fmt.Fprintf(stdout, "State written to %s (mode 0600).\n", o.State)
			fmt.Fprintf(stdout, "An owner of %s must approve it with:\n\n  %s\n\n", st.Repo, st.ApproveCommand())
			fmt.Fprintf(stdout, "Then start it: knotless-run run --state %s --work DIR --executor shell (or docker, or kube: see knotless-run run --help; knotless-run doctor checks the machine first)\n", o.State)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Server, "server", "", "server URL, e.g. https://ci.example.com")
	f.StringVar(&o.Repo, "repo", "", "repository the runner serves, OWNER/NAME")
	f.StringVar(&o.Name, "name", "", "runner name, unique in the repository")
	f.StringVar(&labels, "labels", "", "comma-separated labels the runner advertises (workflows' runners: must all match)")
	f.StringVar(&o.State, "state", "", "state file to write")
	f.BoolVar(&o.Force, "force", false, "replace an existing state file (its identity is lost)")
	f.StringVar(&o.Token, "token", "", "registration token from knotless runner token (or an owner's API token)")
	envflag.BindAs(f, "server", "KNOTLESS_SERVER")
	envflag.BindAs(f, "token", "KNOTLESS_REGISTRATION_TOKEN")
	envflag.BindAs(f, "state", "KNOTLESS_STATE")
	return cmd
}
