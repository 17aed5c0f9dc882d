package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
	"golang.org/x/sys/unix"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// Name is the docker executor's name as the --executor flag spells it.
const Name = "docker"

// Defaults of Config.
const (
	DefaultPids     = executor.DefaultPids
	DefaultDiskPoll = 5 * time.Second
)

// Config configures the docker executor. Of the shared agentenv.Config
// it uses everything: the Job's CPUs and Memory are the container's
// limits when the workflow's resources: say nothing, and the most a
// workflow may ask for (swap is off: MemorySwap = Memory); Agent is the
// static knotless-agent bind-mounted into each container (required).
type Config struct {
	agentenv.Config
	// Client reaches the engine; nil means one from the environment
	// (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH) with the API
	// version negotiated.
	Client *client.Client
	// Pids is the container's process limit; 0 means DefaultPids, -1
	// none.
	Pids int64
	// Runtime is the container runtime (e.g. runsc); empty: the engine's
	// default.
	Runtime string
	// Network is the containers' network: "none", a network's name, or
	// empty for this runner's own bridge network (ensureNetwork: no
	// inter-container communication, the host not reachable).
	Network string
	// DiskFloor is the free space (bytes) the Docker data disk must have
	// before a run starts; 0 means no floor. FreeSpace measures it (nil:
	// statfs of the engine's data root, which must be on this host).
	DiskFloor int64
	FreeSpace func(ctx context.Context) (free uint64, where string, err error)
	// DiskPoll is how often a run held back by DiskFloor looks again
	// (default DefaultDiskPoll).
	DiskPoll time.Duration
	// BuilderImage, when set, allows container builds (a workflow's
	// container-builds: true) and is the image of their builder
	// (knotless-builder with BuildKit, internal/deploy.BuilderImage;
	// builder.go); empty: such workflows are refused before any container
	// exists.
	BuilderImage string
}

// Executor runs each run in a container of its own, made from Config,
// with the step agent as the container's PID 1; every step, copy and
// heartbeat of the run goes over one exec stream to the agent at a time.
type Executor struct {
	*agentenv.Base
	cfg  Config
	api  *client.Client
	log  *slog.Logger
	caps executor.Caps

	netMu   sync.Mutex
	netName string // the runner's own network, once made
}

var (
	_ executor.Executor = (*Executor)(nil)
	_ executor.Doctor   = (*Executor)(nil)
)

// New returns a docker executor. It checks cfg but does not reach the
// engine yet. Errors name the field to fix.
func New(cfg Config) (*Executor, error) {
	if cfg.Agent == "" {
		return nil, errors.New("docker executor: no step agent program (--agent)")
	}
	if !filepath.IsAbs(cfg.Agent) {
		abs, err := filepath.Abs(cfg.Agent)
		if err != nil {
			return nil, fmt.Errorf("docker executor: the step agent: %w", err)
		}
		cfg.Agent = abs
	}
	if cfg.Network == "host" || strings.HasPrefix(cfg.Network, "container:") {
		return nil, fmt.Errorf("docker executor: --network %s: job containers never share the host's or another container's network", cfg.Network)
	}
	cfg.Config = cfg.Config.Defaults()
	caps, err := executor.CapsOf(cfg.Job, 0)
	if err != nil {
		return nil, fmt.Errorf("docker executor: %w", err)
	}
	if caps.MilliCPUs < minMilliCPUs {
		return nil, fmt.Errorf("docker executor: --cpus %s: the engine's least is 0.01 CPUs (10m)", cfg.CPUs)
	}
	if cfg.Pids == 0 {
		cfg.Pids = DefaultPids
	}
	if cfg.DiskPoll <= 0 {
		cfg.DiskPoll = DefaultDiskPoll
	}
	c := cfg.Client
	if c == nil {
		if c, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation()); err != nil {
			return nil, fmt.Errorf("docker executor: engine client: %w", err)
		}
	}
	e := &Executor{cfg: cfg, api: c, caps: caps, log: cfg.Logger.With("executor", Name)}
	if e.cfg.FreeSpace == nil {
		e.cfg.FreeSpace = e.dataRootFree
	}
	e.Base = agentenv.NewBase(Name, (*driver)(e), cfg.Config, nil)
	return e, nil
}

// minMilliCPUs is the least CPU limit the engine takes (0.01 CPUs).
const minMilliCPUs = 10

// Client returns the executor's engine client.
func (e *Executor) Client() *client.Client { return e.api }

// handleData is the docker executor's Handle.Data.
type handleData struct {
	Container string `json:"container"`
	User      string `json:"user"`
}

func (e *Executor) logf(spec executor.Spec, format string, args ...any) {
	if spec.Log != nil {
		fmt.Fprintf(spec.Log, "docker executor: "+format+"\n", args...)
	}
}

// containerName is the job container's name: knotless-RUNNER-ID with
// characters the engine refuses replaced.
func containerName(runner, id string) string {
	b := []byte("knotless-" + runner + "-" + id)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	return string(b)
}

// ensureImage inspects img, pulling it when the engine does not have it.
// An image neither present nor pullable is a Fault with reason image-pull
// and the engine's message.
func (e *Executor) ensureImage(ctx context.Context, spec executor.Spec, img string) (image.InspectResponse, error) {
	got, err := e.api.ImageInspect(ctx, img)
	if err == nil {
		return got, nil
	}
	if !errdefs.IsNotFound(err) {
		return got, fmt.Errorf("inspect image %s: %w", img, err)
	}
	e.logf(spec, "pulling image %s", img)
	rc, err := e.api.ImagePull(ctx, img, image.PullOptions{})
	if err == nil {
		// The pull's progress ends with an error message when it failed.
		err = StreamError(rc)
		rc.Close()
	}
	if err != nil {
		return got, &executor.Fault{Reason: api.ReasonImagePull, Message: fmt.Sprintf("the image %s is not on the engine and cannot be pulled: %v", img, err)}
	}
	got, err = e.api.ImageInspect(ctx, img)
	if err != nil {
		return got, &executor.Fault{Reason: api.ReasonImagePull, Message: fmt.Sprintf("the image %s: %v", img, err)}
	}
	return got, nil
}

// StreamError reads the JSON progress stream the engine answers a pull or
// an image load with (ImagePull, ImageLoad) to its end and returns the
// error it reports (its "error" field), or the stream's own; nil when
// none.
func StreamError(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}

// chownTree makes r the owner of every file under dir (links not
// followed), so that the job's non-root user may write its checkout. A
// runner that is r already does nothing. A regular file with more than
// one link is left alone: the checkout's git objects are hard links to
// the runner's mirror, and owning one would let the job change the
// mirror's copy, which later runs share (it can still read it, and
// remove or replace its own link).
func chownTree(dir string, r RunAs) error {
	if int64(os.Geteuid()) == r.UID {
		return nil
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				return err
			}
			if st.Nlink > 1 {
				return nil
			}
		}
		return os.Lchown(p, int(r.UID), int(r.GID))
	})
	if err != nil {
		return fmt.Errorf("give the checkout to the job's user %s (the runner must run as root, or as that user): %w", userOf(r), err)
	}
	return nil
}

// removeContainer removes container id by force with its volumes; a
// container already gone (or being removed) is no error.
func (e *Executor) removeContainer(ctx context.Context, id string) error {
	err := e.api.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || errdefs.IsNotFound(err) || errdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress") {
		return nil
	}
	return fmt.Errorf("remove container %s: %w", short(id), err)
}

// list returns this runner's job containers, running or not.
func (e *Executor) list(ctx context.Context) ([]container.Summary, error) {
	f := filters.NewArgs(
		filters.Arg("label", agentenv.LabelManagedBy+"="+agentenv.ManagedBy),
		filters.Arg("label", agentenv.LabelExecutor+"="+Name),
		filters.Arg("label", agentenv.LabelRunner+"="+e.cfg.Runner),
	)
	return e.api.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
}

// String describes the executor for logs.
func (e *Executor) String() string {
	return fmt.Sprintf("docker executor (engine %s, runner %s)", e.api.DaemonHost(), e.cfg.Runner)
}
