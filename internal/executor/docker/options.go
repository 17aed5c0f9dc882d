package docker

import (
	"fmt"

	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/shell"
	"knotless.dev/knotless/internal/workflow"
)

// Options are the docker executor's part of knotless-run's command line
// (runnercli.ExecutorOptions). --image, --cpus, --memory and --run-as are
// shared in name and meaning with the kube executor's.
type Options struct {
	image     string
	cpus      string
	memory    string
	runAs     string
	pids      int64
	runtime   string
	network   string
	diskFloor string
}

// Name returns "docker".
func (*Options) Name() string { return Name }

// AddFlags adds the docker executor's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.image, "image", "", "job image for workflows that name no image:")
	fs.StringVar(&o.cpus, "cpus", DefaultCPUs, "job container CPUs (2, 0.5 or 500m), and the most a workflow's resources: may ask for")
	fs.StringVar(&o.memory, "memory", "2Gi", "job container memory, swap off (memory-swap equal), and the most a workflow may ask for; also bounds each tmpfs (HOME, /tmp)")
	fs.StringVar(&o.runAs, "run-as", DefaultRunAs.String(), "job container user: UID:GID, or image for the image's own numeric non-root user")
	fs.Int64Var(&o.pids, "pids", DefaultPids, "process limit of a job container (-1: none); a fork bomb is contained and reported")
	fs.StringVar(&o.runtime, "runtime", "", "container runtime of job containers, e.g. runsc (default: the engine's)")
	fs.StringVar(&o.network, "network", "", "network of job containers: a network's name, or none (default: the runner's own bridge network, no inter-container communication, the runner's host unreachable)")
	fs.StringVar(&o.diskFloor, "disk-floor", "0", "free space the Docker data disk must have before a run starts (e.g. 5Gi; 0: none): a run waits, saying so in its log")
}

// New makes the docker executor from the flags: the engine from the
// environment (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH; API
// version negotiated), the step agent setup.Agent (or the one beside
// knotless-run).
func (o *Options) New(setup executor.Setup) (executor.Executor, error) {
	cfg := Config{
		Runner: setup.Runner, Image: o.image, CPUs: o.cpus, Pids: o.pids,
		Runtime: o.runtime, Network: o.network, Logger: setup.Logger, Ephemeral: setup.Ephemeral,
	}
	var err error
	if cfg.Memory, err = workflow.ParseSize(o.memory); err != nil {
		return nil, fmt.Errorf("--memory %q: %v", o.memory, err)
	}
	if o.diskFloor != "" && o.diskFloor != "0" {
		if cfg.DiskFloor, err = workflow.ParseSize(o.diskFloor); err != nil {
			return nil, fmt.Errorf("--disk-floor %q: %v", o.diskFloor, err)
		}
	}
	if cfg.RunAs, err = ParseRunAs(o.runAs); err != nil {
		return nil, err
	}
	if o.pids == 0 {
		return nil, fmt.Errorf("--pids 0: give a positive limit, or -1 for none")
	}
	cfg.Agent = setup.Agent
	if cfg.Agent == "" {
		if cfg.Agent, err = shell.FindAgent(); err != nil {
			return nil, err
		}
	}
	ex, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ex.log.Info("docker executor ready", "engine", ex.api.DaemonHost(), "runner", cfg.Runner)
	return ex, nil
}
