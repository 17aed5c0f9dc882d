package executor

// Observer receives what an executor does to environments, for
// knotless-run's metrics; the same calls for every executor (a job pod, a
// container or a process tree is an environment). Its methods must be
// cheap and safe for concurrent use; a nil Observer observes nothing.
type Observer interface {
	// EnvironmentMade: executor made and started an environment for a
	// run (a pod created, a container started).
	EnvironmentMade(executor string)
	// EnvironmentRemoved: executor removed an environment (after its run,
	// or swept as left over).
	EnvironmentRemoved(executor string)
	// AgentReconnected: a dropped connection to a step agent in one of
	// executor's environments was dialed again and answered.
	AgentReconnected(executor string)
}
