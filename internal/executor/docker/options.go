package docker

import (
	"fmt"

	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/units"
)

// Options are the docker executor's part of knotless-run's command line;
// it also reads the shared job flags (--image, --cpus, --memory,
// --run-as, --pids, --builder-image).
type Options struct {
	runtime   string
	network   string
	diskFloor string
}

var _ executor.Options = (*Options)(nil)

// Name returns "docker".
func (*Options) Name() string { return Name }

// UsesJob reports true: the docker executor runs images.
func (*Options) UsesJob() bool { return true }

// AddFlags adds the docker executor's own flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.runtime, "runtime", "", "container runtime of job containers, e.g. runsc (default: the engine's)")
	fs.StringVar(&o.network, "network", "", "network of job containers: a network's name, or none (default: the runner's own bridge network, no inter-container communication, the runner's host unreachable)")
	fs.StringVar(&o.diskFloor, "disk-floor", "0", "free space the Docker data disk must have before a run starts (e.g. 5Gi; 0: none): a run waits, saying so in its log")
}

// New makes the docker executor from the flags: the engine from the
// environment (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH; API
// version negotiated), the step agent setup.Agent (or the one beside
// knotless-run).
func (o *Options) New(setup executor.Setup) (executor.Executor, error) {
	cfg := Config{Config: agentenv.ConfigOf(setup), Pids: setup.Job.Pids, Runtime: o.runtime, Network: o.network, BuilderImage: setup.Job.BuilderImage}
	var err error
	if o.diskFloor != "" && o.diskFloor != "0" {
		if cfg.DiskFloor, err = units.ParseSize(o.diskFloor); err != nil {
			return nil, fmt.Errorf("--disk-floor %q: %v", o.diskFloor, err)
		}
	}
	if cfg.Agent, err = agentenv.HostAgent(setup.Agent); err != nil {
		return nil, err
	}
	ex, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ex.log.Info("docker executor ready", "engine", ex.api.DaemonHost(), "runner", ex.cfg.Runner)
	return ex, nil
}
