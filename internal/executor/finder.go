package executor

import "context"

// Finder is implemented by an executor whose environments can be found
// from their Spec.ID alone, without the Handle a runner's journal
// recorded: a runner whose work directory did not survive (a Kubernetes
// runner pod replaced, its work directory an emptyDir) adopts the
// environments of the runs the server says it holds through it.
type Finder interface {
	// Find returns the handle of the environment with Spec.ID id that
	// this runner made (by the labels it put on it) and that still runs,
	// for Recover. found is false when there is none: never made, ended
	// or gone. Errors: the environments could not be listed (transient).
	// Safe to call concurrently; it changes nothing.
	Find(ctx context.Context, id string) (h Handle, found bool, err error)
}
