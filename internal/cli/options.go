package cli

import (
	"context"

	"github.com/spf13/cobra"
)

// options is one command's flags and arguments, with kubectl's three steps
// (kubectl's Complete, Validate, Run), none of which knows cobra:
//
//   - complete takes the positional arguments (cobra has already checked
//     their number) and fills in what the flags leave to the environment
//     or the server: --repo's default from $KNOTLESS_REPO, a bare NAME's
//     owner, a value read from stdin. Its errors are the command's.
//   - validate refuses bad values and combinations, with the errors (and so
//     the exit codes) the command gives; it changes nothing and calls
//     nothing.
//   - run does the work through s (the API client, --json) and prints to
//     s.stdout() and s.stderr().
//
// Each command's cobra constructor only binds its flags to the fields of
// its options and calls the three through runE, so a test can build the
// options as a literal and call them directly, without cobra.
type options interface {
	complete(ctx context.Context, s *session, args []string) error
	validate() error
	run(ctx context.Context, s *session) error
}

// runE is the RunE of a command whose flags are bound to o.
func (s *session) runE(o options) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return execute(cmd.Context(), s, o, args)
	}
}

// execute runs o's complete, validate and run in order and returns the
// first error.
func execute(ctx context.Context, s *session, o options, args []string) error {
	if err := o.complete(ctx, s, args); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	return o.run(ctx, s)
}
