package docker

import (
	"cmp"
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

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/workflow"
)

// Name is the docker executor's name as the --executor flag spells it.
const Name = "docker"

// Defaults of Config.
const (
	DefaultPids     = 1024
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
	_ executor.Executor      = (*Executor)(nil)
	_ executor.EarlyPreparer = (*Executor)(nil)
	_ executor.Doctor        = (*Executor)(nil)
)

// PrepareEarly reports true: Prepare makes and starts the container and
// connects to its agent while the runner fetches the checkout (a bind
// mount of the directory being filled); the checkout is given to the
// job's user at the session's first Exec, CopyIn or CopyOut. A session
// recovered by a later runner process does not give it again (its steps
// may be running, and could swap a directory for a link under the walk):
// a runner that died between Prepare and the first step leaves a run
// whose steps cannot write to the checkout.
func (e *Executor) PrepareEarly() bool { return true }

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

// driver is the docker executor's agentenv.Driver: an environment is a
// job container with the agent as its PID 1.
type driver Executor

// Make makes the run's container (containerFor: hardened, one per run,
// never reused) after the disk floor allows it, and starts it with the
// agent as PID 1. The checkout at spec.Workspace is bind-mounted as
// agentenv.Workspace (nothing is copied), and given to the container's
// user at the session's first Exec, CopyIn or CopyOut (PrepareEarly;
// never under `knotless-run exec`). It writes to spec.Log the container,
// image, limits, user and network. Caches move by the host's file system
// for the checkout (hostCaches).
//
// Errors: a workflow asking for more than the runner allows; an image
// that is neither present nor pullable (a *executor.Fault with reason
// image-pull and the engine's message); an engine that refuses the
// container (reason executor, its message). On error the container is
// removed.
func (d *driver) Make(ctx context.Context, spec executor.Spec, serve agent.Serve) (*agentenv.Env, error) {
	e := (*Executor)(d)
	if spec.Workspace == "" {
		return nil, errors.New("no workspace: the checkout is bind-mounted from the runner's disk")
	}
	img, res, err := e.caps.ImageAndResources(spec, e.cfg.Image)
	if err != nil {
		return nil, err
	}
	nano, mem := res.MilliCPUs*1e6, res.Memory
	if err := e.waitDisk(ctx, spec); err != nil {
		return nil, err
	}
	netName, err := e.network(ctx)
	if err != nil {
		return nil, err
	}
	inspect, err := e.ensureImage(ctx, spec, img)
	if err != nil {
		return nil, err
	}
	runAs := e.cfg.RunAs
	if runAs.Image {
		if runAs, err = imageUser(img, inspect.Config.User); err != nil {
			return nil, &executor.Fault{Reason: api.ReasonExecutor, Message: err.Error()}
		}
	}
	if e.cfg.Ephemeral {
		// `knotless-run exec` runs in a person's own work tree: it is
		// never given away; steps may write where its modes let them.
		var st unix.Stat_t
		if unix.Stat(spec.Workspace, &st) == nil && (int64(st.Uid) != runAs.UID) {
			hint := fmt.Sprintf(" (--run-as %d:%d runs them as its owner)", st.Uid, st.Gid)
			if st.Uid == 0 {
				hint = " (job containers never run as root)"
			}
			e.logf(spec, "the checkout %s belongs to UID %d and stays so; steps run as %s and write to it only where its modes allow%s", spec.Workspace, st.Uid, userOf(runAs), hint)
		}
	}
	labels := map[string]string{LabelManagedBy: ManagedBy, LabelExecutor: Name, LabelRunner: e.cfg.Runner, LabelRun: spec.ID}
	for k, v := range spec.Labels {
		if _, ok := labels[k]; !ok {
			labels[k] = v
		}
	}
	cfg, hc := containerFor(containerSpec{
		Image: img, Labels: labels, RunAs: runAs, NanoCPUs: nano, Memory: mem,
		Pids: e.cfg.Pids, Runtime: e.cfg.Runtime, Network: netName,
		Agent: e.cfg.Agent, Workspace: spec.Workspace,
		Cmd: append([]string{AgentPath}, agentenv.ContainerServe(serve).Args()...),
	})
	hc.AutoRemove = e.cfg.Ephemeral
	name := containerName(e.cfg.Runner, spec.ID)
	created, err := e.api.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if err != nil {
		if errdefs.IsConflict(err) {
			// A container of an earlier process under this name, which no
			// session holds: it is this runner's to remove.
			_ = e.api.ContainerRemove(context.WithoutCancel(ctx), name, container.RemoveOptions{Force: true, RemoveVolumes: true})
			created, err = e.api.ContainerCreate(ctx, cfg, hc, nil, nil, name)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &executor.Fault{Reason: api.ReasonExecutor, Message: "the engine refused the job container: " + err.Error()}
		}
	}
	id := created.ID
	if err := e.api.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		e.removeContainer(context.WithoutCancel(ctx), id)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &executor.Fault{Reason: api.ReasonExecutor, Message: "the engine could not start the job container: " + err.Error()}
	}
	pids := "none"
	if e.cfg.Pids > 0 {
		pids = fmt.Sprint(e.cfg.Pids)
	}
	e.logf(spec, "container %s (%s) from image %s: cpus %s, memory %s (no swap), pids %s, runtime %s, user %s, network %s, read-only root file system, all capabilities dropped",
		name, short(id), img, executor.FormatCPUs(res.MilliCPUs), workflow.FormatSize(mem), pids, cmp.Or(e.cfg.Runtime, "default"), userOf(runAs), netName)
	env := e.env(id, userOf(runAs))
	if !e.cfg.Ephemeral {
		// The checkout is complete by the first Exec, CopyIn or CopyOut
		// (PrepareEarly), and no step has run yet: nothing in the
		// container can swap a directory for a link while the tree is
		// walked.
		ws := spec.Workspace
		env.Ready = func(context.Context, *agentenv.Session) error { return chownTree(ws, runAs) }
	}
	env.Attached = func(_ context.Context, _ *agent.Client, hello agent.AgentHello) error {
		hostCaches(env, hello.Workdir, spec.Workspace, runAs)
		return nil
	}
	return env, nil
}

// Open finds the container a handle names for Recover: it must still
// exist and run.
func (d *driver) Open(ctx context.Context, _ string, data json.RawMessage) (*agentenv.Env, error) {
	e := (*Executor)(d)
	var h handleData
	if err := json.Unmarshal(data, &h); err != nil || h.Container == "" {
		return nil, fmt.Errorf("unreadable handle: %w", executor.ErrNotRecoverable)
	}
	st, err := e.api.ContainerInspect(ctx, h.Container)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("the container %s is gone: %w", short(h.Container), executor.ErrNotRecoverable)
	}
	if err != nil {
		return nil, err
	}
	if st.State == nil || !st.State.Running {
		return nil, fmt.Errorf("%s: %w", stateMessage(st), executor.ErrNotRecoverable)
	}
	return e.env(h.Container, h.User), nil
}

// List returns this runner's job containers (by their labels).
func (d *driver) List(ctx context.Context) ([]agentenv.Listed, error) {
	e := (*Executor)(d)
	list, err := e.list(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]agentenv.Listed, 0, len(list))
	for _, c := range list {
		id := c.ID
		out = append(out, agentenv.Listed{ID: c.Labels[LabelRun], Name: "container " + short(id),
			Remove: func(ctx context.Context) error { return e.removeContainer(ctx, id) }})
	}
	return out, nil
}

// env is container id as an environment: each dial is a new exec of
// `knotless-agent connect` as user; a container that is gone or no longer
// running makes a dial fail with agent.ErrGone, and says why
// (containerFault). A step's Note says when it reached the process limit.
func (e *Executor) env(id, user string) *agentenv.Env {
	connect := append([]string{AgentPath}, agent.Connect{Socket: AgentSocket, Wait: 10 * time.Second}.Args()...)
	return &agentenv.Env{
		Name: "container " + short(id),
		Data: handleData{Container: id, User: user},
		Dial: func(ctx context.Context) (io.ReadWriteCloser, error) {
			st, err := e.api.ContainerInspect(ctx, id)
			if errdefs.IsNotFound(err) {
				return nil, fmt.Errorf("%w: the job container %s is gone", agent.ErrGone, short(id))
			}
			if err == nil && (st.State == nil || !st.State.Running) {
				return nil, fmt.Errorf("%w: %s", agent.ErrGone, stateMessage(st))
			}
			return e.openStream(ctx, id, user, connect)
		},
		Why:    func(ctx context.Context) *executor.Fault { return e.containerFault(ctx, id) },
		Remove: func(ctx context.Context, _ bool) error { return e.removeContainer(ctx, id) },
		AroundStep: func() func(*executor.Result) {
			if e.cfg.Pids <= 0 {
				return nil
			}
			before := e.pidsRefused(id)
			return func(res *executor.Result) {
				if n := e.pidsRefused(id) - before; n > 0 {
					note := fmt.Sprintf("the step reached the container's process limit (--pids %d): %d process creations were refused", e.cfg.Pids, n)
					res.Note = strings.TrimPrefix(strings.TrimSpace(res.Note+"; "+note), "; ")
				}
			}
		},
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
		err = pullResult(rc)
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

// pullResult reads a pull's JSON progress and returns its error, if any.
func pullResult(r io.Reader) error {
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
		filters.Arg("label", LabelManagedBy+"="+ManagedBy),
		filters.Arg("label", LabelExecutor+"="+Name),
		filters.Arg("label", LabelRunner+"="+e.cfg.Runner),
	)
	return e.api.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
}

// String describes the executor for logs.
func (e *Executor) String() string {
	return fmt.Sprintf("docker executor (engine %s, runner %s)", e.api.DaemonHost(), e.cfg.Runner)
}
