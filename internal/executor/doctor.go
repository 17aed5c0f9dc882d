package executor

import "context"

// Check is the result of one check of `knotless-run doctor`: one line of its
// output, "ok" or "FAIL".
type Check struct {
	// Name says what was checked, e.g. "pods/exec create" or "engine
	// reachable".
	Name string
	// OK is whether the check passed.
	OK bool
	// Detail is what was found: a version, a count, the error's message.
	Detail string
	// Fix says, for a failed check, what the operator should do about it.
	Fix string
}

// Doctor is implemented by an executor that can check the machine it runs
// jobs on, for `knotless-run doctor --executor NAME`.
type Doctor interface {
	// Doctor runs the executor's checks and calls report once per check,
	// in order, as each finishes. When machine is true it also starts a
	// real environment, runs a step with a test secret in it over the
	// step agent's stream and removes the environment again (the doctor's
	// --skip-machine turns this off). It returns early only when ctx ends;
	// a failed check is reported, not returned.
	Doctor(ctx context.Context, machine bool, report func(Check))
}
