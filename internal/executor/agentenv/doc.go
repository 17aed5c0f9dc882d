// Package agentenv is the layer every agent-based executor shares: the
// executors whose environment (a host directory, a container, a pod) runs
// the step agent (internal/stepagent) and is reached over the agent
// protocol (internal/agent). An executor writes only what is its own, as
// a Driver: how an environment is made (Make), found again (Open, List),
// attached to (Environment.Dial), why it stopped (Environment.Why) and
// removed (Environment.Remove), with optional Hooks. Base does the rest
// the same way for every executor: the run-ID rule, the Prepare, Recover
// and Sweep skeletons, the agent client, the session (Session: steps,
// copies, caches, detached steps, cleanup), and the rule that a step the
// environment stopped is never reported as cancelled by nobody.
//
// It also holds what the agent-based executors share besides: their
// common Config, the agent's program (FindAgent), the paths and labels
// inside a container or pod, and the exec stream's STDERR capture
// (StderrTail).
//
// It must never hold a secret anywhere but inside a Start message on the
// stream (agent.Client), nor know a particular executor.
package agentenv
