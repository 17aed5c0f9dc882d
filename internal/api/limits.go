package api

// XRPC error names of the server's limits on what one client may make it
// hold (see docs/limits.md). Each message names the limit and the
// knotless-server flag that sets it.
const (
	// ErrTooManyPending (429): the repository has the most runners
	// awaiting approval the server allows; an owner approves or removes
	// some first.
	ErrTooManyPending = "TooManyPendingRunners"
	// ErrTooManyClaims (429): the runner identity already has the most
	// claims (long polls) open the server allows; retry after one ends.
	ErrTooManyClaims = "TooManyClaims"
	// ErrTooManyTokens (429 for one runner, 503 for the whole server):
	// the server remembers as many unexpired runner tokens as it allows,
	// and refuses new ones, rather than forget a used one, until some
	// expire; retry after a backoff.
	ErrTooManyTokens = "TooManyTokens"
	// ErrTooManyRegistrations (429, with Retry-After): the client address
	// sent more runner registrations than the server allows per minute.
	ErrTooManyRegistrations = "TooManyRegistrations"
	// ErrServerBusy (503, with Retry-After): the server's database did not
	// answer within the server's own time limit (e.g. thousands of runners
	// starting their long polls at once); retry after the wait it gives.
	ErrServerBusy = "ServerBusy"
)
