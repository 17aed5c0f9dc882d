package agentenv

import "knotless.dev/knotless/internal/agent"

// Labels every job container and pod carries: the manager (Kubernetes'
// recommended label), the executor, the runner's name and the run's
// environment ID (executor.Spec.ID). Never secrets.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "knotless"
	LabelExecutor  = "knotless.dev/executor"
	LabelRunner    = "knotless.dev/runner"
	LabelRun       = "knotless.dev/run"
)

// Paths inside a job container or pod (docker, kube). The root file system
// is read-only; each of these is a volume of the environment's own.
const (
	// AgentDir holds the agent's state (step output files, exit statuses)
	// and its socket.
	AgentDir = "/knotless"
	// AgentSocket is the agent's Unix socket.
	AgentSocket = AgentDir + "/agent.sock"
	// AgentState is the agent's state directory.
	AgentState = AgentDir + "/state"
	// Workspace is the checkout, the steps' working directory.
	Workspace = "/workspace"
	// Home is the steps' HOME.
	Home = "/home/knotless"
	// Tmp is the steps' TMPDIR.
	Tmp = "/tmp"
)

// DefaultPATH is the PATH of a step in a container or pod that sets none:
// the usual one of Linux images.
const DefaultPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ContainerServe is the agent's command line inside a container or pod:
// state, socket, workspace, HOME and TMPDIR at the paths above, and steps
// that start from the image's environment (its PATH first, DefaultPATH
// only for an image without one); Base fills the rest.
func ContainerServe(base agent.Serve) agent.Serve {
	base.Dir, base.Socket = AgentState, AgentSocket
	base.Workdir, base.Home, base.Tmp, base.PATH = Workspace, Home, Tmp, DefaultPATH
	base.ImageEnv = true
	return base
}
