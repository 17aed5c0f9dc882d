package executor

import (
	"context"
	"io"
)

// The optional capabilities. An Executor or a Session has the ones it
// implements; the runner finds them by type assertion, and this list is
// where they are all named (Capabilities reports them). Each executor
// asserts the ones it has at compile time (var _ executor.Finder = ...),
// and its tests pin the list Capabilities gives.
//
//	on an Executor:
//	  Finder         environments found by Spec.ID alone (a runner whose
//	                 work directory was lost adopts them)
//	  Doctor         `knotless-run doctor` checks
//	  Facter         facts of where runs go, for the server's Runners page
//	  EnvironmentCounter  its environments by phase, for metrics
//	  io.Closer      resources of the executor itself (a watch) to release
//	on a Session:
//	  Cacher         caches move by the executor's own path
//	  DetachedSteps  `detach: true` steps (services) run beside later steps
//	  ServiceLogger  the logs of the run's services (Spec.Services)
//
// Capabilities names the optional capabilities x (an Executor or a
// Session) has, in the order of the list above: "find",
// "doctor", "facts", "count", "close", "cache", "detached-steps", "service-logs".
func Capabilities(x any) []string {
	var out []string
	if _, ok := x.(Finder); ok {
		out = append(out, "find")
	}
	if _, ok := x.(Doctor); ok {
		out = append(out, "doctor")
	}
	if _, ok := x.(Facter); ok {
		out = append(out, "facts")
	}
	if _, ok := x.(EnvironmentCounter); ok {
		out = append(out, "count")
	}
	if _, ok := x.(io.Closer); ok {
		out = append(out, "close")
	}
	if _, ok := x.(Cacher); ok {
		out = append(out, "cache")
	}
	if _, ok := x.(DetachedSteps); ok {
		out = append(out, "detached-steps")
	}
	if _, ok := x.(ServiceLogger); ok {
		out = append(out, "service-logs")
	}
	return out
}

// Facter is implemented by an Executor that can say where its runs go, for
// the people reading the server's Runners page: a few names and values
// (a kube executor's namespace, its job pods' owner and the runner's own
// pod), each short text
// that is never a secret. The runner sends them when its session starts
// (api.StartSessionInput.Facts). Safe to call concurrently.
type Facter interface {
	Facts() map[string]string
}

// ServiceLogger is implemented by a Session whose environment runs
// services (Spec.Services): ServiceLog returns the end of service name's
// output (STDOUT and STDERR), at most max bytes. The runner adds each
// service's log to the run's setup log when the steps have ended.
type ServiceLogger interface {
	ServiceLog(ctx context.Context, name string, max int64) ([]byte, error)
}

// EnvironmentCounter is implemented by an Executor that can count the
// environments it holds by phase cheaply, from a cache (kube: its job pods
// by status.phase, and "Warm" for the warm pool's), for the runner's
// metrics (knotless_runner_job_pods). Phases are a small fixed set. Safe
// to call concurrently; nil before the executor watches anything.
type EnvironmentCounter interface {
	EnvironmentsByPhase() map[string]int
}
