package main

import (
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/envflag"
	"knotless.dev/knotless/internal/oidc"
	"knotless.dev/knotless/internal/server"
)

// newOIDCKeysCommand is `knotless-server oidc-keys list|rotate`: the keys
// that sign the runs' id tokens (docs/oidc.md).
func newOIDCKeysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "oidc-keys",
		Short: "List or rotate the keys that sign the runs' id tokens",
		Long: `The server signs id tokens (docs/oidc.md) with the current key of
DATA/` + oidc.KeysFile + ` (RSA 2048, RS256; made on first start) and
publishes the public keys at URL/.well-known/jwks.json.

rotate makes a new current key while the server runs (servers on the data
directory, replicas too, sign with it from their next token on). The old
key stays published for --grace, by default longer than any token lives,
so tokens it signed verify until they expire. --grace 0 unpublishes it at
once, for a key that leaked: every token it signed is refused from then on
by relying parties that fetch the keys again (Kubernetes does when it sees
a token whose key it does not know).`,
		Args: cobra.NoArgs,
	}
	var dataDir string
	var grace time.Duration
	list := &cobra.Command{
		Use:   "list [--data DIR]",
		Short: "List the signing keys: kid, created, retired, published until",
		Args:  cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := envflag.Apply(cmd.Flags()); err != nil {
				return &usageError{err}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := os.Stat(filepath.Join(dataDir, oidc.KeysFile)); err != nil {
				return fmt.Errorf("no id token keys in %s (a server makes them on its first start): %w", dataDir, err)
			}
			kr, err := oidc.OpenKeyring(dataDir)
			if err != nil {
				return err
			}
			set, err := kr.Keys()
			if err != nil {
				return err
			}
			printKeys(cmd, set.All(), time.Now())
			return nil
		},
	}
	rotate := &cobra.Command{
		Use:   "rotate [--data DIR] [--grace DURATION]",
		Short: "Make a new signing key; the old one stays published for --grace",
		Args:  cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := envflag.Apply(cmd.Flags()); err != nil {
				return &usageError{err}
			}
			if grace < 0 {
				return usagef("--grace %s: want 0 or more", grace)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := os.Stat(dataDir); err != nil {
				return fmt.Errorf("data directory: %w", err)
			}
			rot, err := oidc.Rotate(dataDir, time.Now(), grace)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "new current key %s\n", rot.Current.ID)
			if rot.Retired.ID != "" {
				if grace > 0 {
					fmt.Fprintf(out, "retired key %s, published until %s\n", rot.Retired.ID, rot.Retired.PublishUntil.Format(time.RFC3339))
				} else {
					fmt.Fprintf(out, "retired key %s, unpublished now: tokens it signed are refused\n", rot.Retired.ID)
				}
			}
			for _, k := range rot.Dropped {
				if k.ID != rot.Retired.ID {
					fmt.Fprintf(out, "removed key %s (published until %s)\n", k.ID, k.PublishUntil.Format(time.RFC3339))
				}
			}
			return nil
		},
	}
	for _, c := range []*cobra.Command{list, rotate} {
		c.Flags().StringVar(&dataDir, "data", server.DefaultDataDir, "data directory holding "+oidc.KeysFile)
		envflag.Bind(c.Flags(), "data")
	}
	rotate.Flags().DurationVar(&grace, "grace", oidc.DefaultGrace, "how long the retired key stays published (0: unpublish it now, for a leaked key)")
	cmd.AddCommand(list, rotate)
	return cmd
}

func printKeys(cmd *cobra.Command, keys []oidc.Key, now time.Time) {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KID\tCREATED\tSTATE")
	for i, k := range keys {
		state := "current"
		switch {
		case i > 0 && now.Before(k.PublishUntil):
			state = "retired " + k.Retired.Format(time.RFC3339) + ", published until " + k.PublishUntil.Format(time.RFC3339)
		case i > 0:
			state = "retired " + k.Retired.Format(time.RFC3339) + ", no longer published"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", k.ID, k.Created.Format(time.RFC3339), state)
	}
	tw.Flush()
}
