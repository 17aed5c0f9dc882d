package agentenv

import (
	"cmp"
	"log/slog"
	"time"

	"knotless.dev/knotless/internal/executor"
)

// Config is what every agent-based executor's configuration holds; each
// executor's Config embeds it.
type Config struct {
	// Runner names the runner on what the executor makes (labels, names),
	// so that Sweep finds this runner's environments and no other's.
	// Empty: "runner".
	Runner string
	// Job is the job environment's defaults and caps (the shared --image,
	// --cpus, --memory and --run-as); executors that run no image ignore
	// it.
	executor.Job
	// Agent is the knotless-agent program (an absolute path once New has
	// run). Empty: FindAgent.
	Agent string
	// Heartbeat and DeadAfter tune the agent connection; zero means
	// agent.DefaultHeartbeat and agent.DefaultDeadAfter.
	Heartbeat time.Duration
	DeadAfter time.Duration
	// Logger receives the executor's events; nil means slog.Default().
	Logger *slog.Logger
	// Ephemeral says no runner process will ever take the environments
	// over (`knotless-run exec`): each agent ends its steps and exits once
	// no runner has been connected for OrphanAfter (default 30 s), so a
	// killed exec leaves nothing running.
	Ephemeral   bool
	OrphanAfter time.Duration
	// Observer, when set, is told what Base does to environments.
	Observer executor.Observer
}

// DefaultOrphanAfter is Config.OrphanAfter's default.
const DefaultOrphanAfter = 30 * time.Second

// ConfigOf is the Config of an executor made from knotless-run's command
// line (executor.Setup).
func ConfigOf(setup executor.Setup) Config {
	return Config{
		Runner: setup.Runner, Job: setup.Job, Agent: setup.Agent,
		Logger: setup.Logger, Ephemeral: setup.Ephemeral, Observer: setup.Observer,
	}
}

// Defaults fills what c leaves out: Runner, the Job's CPUs, Memory and
// RunAs, Logger and OrphanAfter (not Agent: see ResolveAgent).
func (c Config) Defaults() Config {
	c.Runner = cmp.Or(c.Runner, "runner")
	c.CPUs = cmp.Or(c.CPUs, executor.DefaultCPUs)
	if c.Memory <= 0 {
		c.Memory = executor.DefaultMemory
	}
	if c.RunAs == (executor.RunAs{}) {
		c.RunAs = executor.DefaultRunAs
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.OrphanAfter = cmp.Or(c.OrphanAfter, DefaultOrphanAfter)
	return c
}
