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
	"regexp"
	"slices"
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
	"knotless.dev/knotless/internal/executor/agentsession"
	"knotless.dev/knotless/internal/version"
)

// Name is the docker executor's name as the --executor flag spells it.
const Name = "docker"

// Defaults of Config.
const (
	DefaultCPUs     = "1"
	DefaultMemory   = 2 << 30 // bytes
	DefaultPids     = 1024
	DefaultDiskPoll = 5 * time.Second
)

// Config configures the docker executor.
type Config struct {
	// Client reaches the engine; nil means one from the environment
	// (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH) with the API
	// version negotiated.
	Client *client.Client
	// Runner names the runner in the containers' LabelRunner label, so
	// that Sweep finds this runner's containers and no other's.
	Runner string
	// Image is the job image when the workflow names none.
	Image string
	// CPUs (a count such as "2" or "0.5", or Kubernetes' "500m") and
	// Memory (bytes) are the container's limits when the workflow's
	// resources: say nothing, and the most a workflow may ask for. Zero:
	// DefaultCPUs, DefaultMemory. Swap is off (MemorySwap = Memory).
	CPUs   string
	Memory int64
	// Pids is the container's process limit; 0 means DefaultPids, -1
	// none.
	Pids int64
	// RunAs is the container's user; zero value: DefaultRunAs.
	RunAs RunAs
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
	// Agent is the static knotless-agent program bind-mounted into each
	// container. Required.
	Agent string
	// Heartbeat and DeadAfter tune the agent connection; zero means
	// agent.DefaultHeartbeat and agent.DefaultDeadAfter.
	Heartbeat time.Duration
	DeadAfter time.Duration
	// Logger receives the executor's events; nil means slog.Default().
	Logger *slog.Logger
	// Ephemeral says no runner process will ever take the containers over
	// (`knotless-run exec`): each container's agent ends its steps and
	// exits once no runner has been connected for OrphanAfter (default
	// 30 s), and the engine then removes the container.
	Ephemeral   bool
	OrphanAfter time.Duration
}

// Executor runs each run in a container of its own, made from Config,
// with the step agent as the container's PID 1; every step, copy and
// heartbeat of the run goes over one exec stream to the agent at a time.
type Executor struct {
	cfg      Config
	api      *client.Client
	log      *slog.Logger
	nanoCPUs int64

	netMu   sync.Mutex
	netName string // the runner's own network, once made

	live agentsession.Live
}

var _ executor.Executor = (*Executor)(nil)
var _ executor.EarlyPreparer = (*Executor)(nil)

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
	cfg.CPUs = cmp.Or(cfg.CPUs, DefaultCPUs)
	nano, err := ParseCPUs(cfg.CPUs)
	if err != nil {
		return nil, fmt.Errorf("docker executor: --cpus %q: %w", cfg.CPUs, err)
	}
	if cfg.Memory <= 0 {
		cfg.Memory = DefaultMemory
	}
	if cfg.Pids == 0 {
		cfg.Pids = DefaultPids
	}
	if cfg.RunAs == (RunAs{}) {
		cfg.RunAs = DefaultRunAs
	}
	if cfg.DiskPoll <= 0 {
		cfg.DiskPoll = DefaultDiskPoll
	}
	cfg.Runner = cmp.Or(cfg.Runner, "runner")
	log := cmp.Or(cfg.Logger, slog.Default())
	c := cfg.Client
	if c == nil {
		if c, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation()); err != nil {
			return nil, fmt.Errorf("docker executor: engine client: %w", err)
		}
	}
	e := &Executor{cfg: cfg, api: c, nanoCPUs: nano, log: log.With("executor", Name)}
	if e.cfg.FreeSpace == nil {
		e.cfg.FreeSpace = e.dataRootFree
	}
	return e, nil
}

// Name returns "docker".
func (e *Executor) Name() string { return Name }

// Client returns the executor's engine client.
func (e *Executor) Client() *client.Client { return e.api }

// validID is what a Spec.ID must look like.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// handleData is the docker executor's Handle.Data.
type handleData struct {
	Container string `json:"container"`
	User      string `json:"user"`
}

// resources resolves the container's limits from the workflow's
// resources: and the runner's caps, as the kube executor does: a workflow
// asking for more than a cap is refused, every such value named with its
// cap.
func (e *Executor) resources(spec executor.Spec) (nano, mem int64, err error) {
	nano, mem = e.nanoCPUs, e.cfg.Memory
	var over []string
	if spec.CPUs != "" {
		n, perr := ParseCPUs(spec.CPUs)
		if perr != nil {
			return 0, 0, &executor.Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf("resources.cpus %q: %v", spec.CPUs, perr)}
		}
		if n > e.nanoCPUs {
			over = append(over, fmt.Sprintf("cpus %s (--cpus %s)", spec.CPUs, e.cfg.CPUs))
		} else {
			nano = n
		}
	}
	if spec.MemoryBytes > 0 {
		if spec.MemoryBytes > e.cfg.Memory {
			over = append(over, fmt.Sprintf("memory %d bytes (--memory %d bytes)", spec.MemoryBytes, e.cfg.Memory))
		} else {
			mem = spec.MemoryBytes
		}
	}
	if len(over) > 0 {
		return 0, 0, &executor.Fault{Reason: api.ReasonExecutor,
			Message: "the workflow asks for more than this runner allows: " + strings.Join(over, ", ")}
	}
	return nano, mem, nil
}

func (e *Executor) logf(spec executor.Spec, format string, args ...any) {
	if spec.Log != nil {
		fmt.Fprintf(spec.Log, "docker executor: "+format+"\n", args...)
	}
}

// Prepare makes the run's container (containerFor: hardened, one per run,
// never reused) after the disk floor allows it, starts it with the agent
// as PID 1 and connects to the agent over an exec. The checkout at
// spec.Workspace is bind-mounted as Workspace (nothing is copied), and
// given to the container's user at the session's first Exec, CopyIn or
// CopyOut (PrepareEarly; never under `knotless-run exec`). It writes to
// spec.Log the container, image, limits, user and network. Caches move by
// the host's file system for the checkout (hostCaches).
//
// Errors: a workflow asking for more than the runner allows; an image
// that is neither present nor pullable (a *executor.Fault with reason
// image-pull and the engine's message); an engine that refuses the
// container (reason executor, its message). On error the container is
// removed.
func (e *Executor) Prepare(ctx context.Context, spec executor.Spec) (executor.Session, error) {
	if !validID.MatchString(spec.ID) {
		return nil, fmt.Errorf("prepare docker session %q: the run ID must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", spec.ID)
	}
	if !e.live.Reserve(spec.ID) {
		return nil, fmt.Errorf("prepare docker session %s: a session with this ID is still live (call Cleanup first)", spec.ID)
	}
	s, err := e.prepare(ctx, spec)
	e.live.Done(spec.ID, s)
	if err != nil {
		return nil, fmt.Errorf("prepare docker session %s: %w", spec.ID, err)
	}
	return e.wrap(s), nil
}

func (e *Executor) prepare(ctx context.Context, spec executor.Spec) (*agentsession.Session, error) {
	fi, err := os.Stat(spec.Workspace)
	if err != nil || !fi.IsDir() {
		if err == nil {
			err = fmt.Errorf("%s is not a directory", spec.Workspace)
		}
		return nil, fmt.Errorf("workspace: %w", err)
	}
	img := cmp.Or(spec.Image, e.cfg.Image)
	if img == "" {
		return nil, errors.New("the workflow names no image: and the runner has no default image (--image)")
	}
	nano, mem, err := e.resources(spec)
	if err != nil {
		return nil, err
	}
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
	var deadline time.Time
	if spec.Timeout > 0 {
		deadline = time.Now().Add(spec.Timeout)
	}
	var extra []string
	if e.cfg.Ephemeral {
		extra = append(extra, "--exit-without-client", cmp.Or(e.cfg.OrphanAfter, 30*time.Second).String())
	}
	if e.cfg.Heartbeat > 0 {
		extra = append(extra, "--heartbeat", e.cfg.Heartbeat.String())
	}
	if e.cfg.DeadAfter > 0 {
		extra = append(extra, "--dead-after", e.cfg.DeadAfter.String())
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
		Cmd: agentCommand(spec.ID, deadline, extra),
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
	ok := false
	defer func() {
		if !ok {
			e.removeContainer(context.WithoutCancel(ctx), id)
		}
	}()
	if err := e.api.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &executor.Fault{Reason: api.ReasonExecutor, Message: "the engine could not start the job container: " + err.Error()}
	}
	pids := "none"
	if e.cfg.Pids > 0 {
		pids = fmt.Sprint(e.cfg.Pids)
	}
	e.logf(spec, "container %s (%s) from image %s: cpus %s, memory %d MiB (no swap), pids %s, runtime %s, user %s, network %s, read-only root file system, all capabilities dropped",
		name, short(id), img, cpusString(nano), mem>>20, pids, cmp.Or(e.cfg.Runtime, "default"), userOf(runAs), netName)
	handle, _ := json.Marshal(handleData{Container: id, User: userOf(runAs)})
	client := e.newClient(spec.ID, id, userOf(runAs))
	hello, err := client.Connect(ctx)
	if err != nil {
		_ = client.Close()
		if f := e.containerFault(ctx, id); f != nil {
			return nil, f
		}
		return nil, fmt.Errorf("connect to the step agent in container %s: %w", short(id), err)
	}
	ok = true
	var ready func(context.Context) error
	if !e.cfg.Ephemeral {
		// The checkout is complete by the first Exec, CopyIn or CopyOut
		// (PrepareEarly), and no step has run yet: nothing in the
		// container can swap a directory for a link while the tree is
		// walked.
		ws := spec.Workspace
		ready = func(context.Context) error { return chownTree(ws, runAs) }
	}
	s := e.newSession(spec.ID, id, hello.Workdir, client, handle, ready)
	hostCaches(s, hello.Workdir, spec.Workspace, runAs)
	return s, nil
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

// newClient returns the agent client of a run's container: each dial is
// a new exec of `knotless-agent connect`. A container that is gone or no
// longer running makes a dial fail with agent.ErrGone.
func (e *Executor) newClient(run, id, user string) *agent.Client {
	dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
		st, err := e.api.ContainerInspect(ctx, id)
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: the job container %s is gone", agent.ErrGone, short(id))
		}
		if err == nil && (st.State == nil || !st.State.Running) {
			return nil, fmt.Errorf("%w: %s", agent.ErrGone, stateMessage(st))
		}
		return e.openStream(ctx, id, user, []string{AgentPath, "connect", "--socket", AgentSocket, "--wait", "10s"})
	}
	return agent.NewClient(dial, agent.Options{
		Name:      "knotless-run " + version.Version,
		Heartbeat: e.cfg.Heartbeat,
		DeadAfter: e.cfg.DeadAfter,
		Logger:    e.log.With("run", run, "container", short(id)),
		OnHello: func(h agent.AgentHello) error {
			if h.Run != run {
				return fmt.Errorf("the agent in container %s serves run %q, not %q", short(id), h.Run, run)
			}
			return nil
		},
	})
}

func (e *Executor) newSession(run, id, workdir string, client *agent.Client, handle json.RawMessage, ready func(context.Context) error) *agentsession.Session {
	var s *agentsession.Session
	s = agentsession.New(agentsession.Config{
		Executor: Name, ID: run, Workdir: workdir, Client: client, Ready: ready,
		Handle: executor.Handle{Executor: Name, ID: run, Data: handle},
		Fault: func(err error) (executor.Result, bool) {
			f := e.containerFault(context.Background(), id)
			if f == nil {
				return executor.Result{}, false
			}
			return faultResult(f), true
		},
		Remove: func(ctx context.Context) error { return e.remove(ctx, s, id) },
		Forget: func() { e.live.Forget(run, s) },
	})
	return s
}

// shutdownBound bounds asking the agent to end its steps and exit.
const shutdownBound = 10 * time.Second

// remove ends a session's container: it asks the agent over the session's
// stream to kill every step process and exit, then removes the container
// (forced: what is left gets SIGKILL) with its anonymous volumes.
func (e *Executor) remove(ctx context.Context, s *agentsession.Session, id string) error {
	sctx, cancel := context.WithTimeout(ctx, shutdownBound)
	if err := s.Client().Shutdown(sctx); err != nil {
		e.log.Debug("the agent could not be asked to shut down; removing its container by force", "container", short(id), "err", err)
	}
	cancel()
	return e.removeContainer(ctx, id)
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

// Recover re-attaches to the container h describes: it must still exist
// and run; then a new exec reaches its agent. Errors wrap
// executor.ErrNotRecoverable when the handle is not this executor's or
// the container is gone or ended.
func (e *Executor) Recover(ctx context.Context, h executor.Handle) (executor.Session, error) {
	notRecoverable := func(format string, args ...any) error {
		return fmt.Errorf("recover docker session %s: %s: %w", h.ID, fmt.Sprintf(format, args...), executor.ErrNotRecoverable)
	}
	if h.Executor != Name {
		return nil, notRecoverable("the handle is of executor %q", h.Executor)
	}
	var data handleData
	if err := json.Unmarshal(h.Data, &data); err != nil || data.Container == "" {
		return nil, notRecoverable("unreadable handle")
	}
	st, err := e.api.ContainerInspect(ctx, data.Container)
	if errdefs.IsNotFound(err) {
		return nil, notRecoverable("the container %s is gone", short(data.Container))
	}
	if err != nil {
		return nil, fmt.Errorf("recover docker session %s: %w", h.ID, err)
	}
	if st.State == nil || !st.State.Running {
		return nil, notRecoverable("%s", stateMessage(st))
	}
	if !e.live.Reserve(h.ID) {
		return nil, fmt.Errorf("recover docker session %s: a session with this ID is live in this process", h.ID)
	}
	client := e.newClient(h.ID, data.Container, data.User)
	hello, err := client.Connect(ctx)
	if err != nil {
		_ = client.Close()
		e.live.Done(h.ID, nil)
		if errors.Is(err, agent.ErrGone) || errors.Is(err, agent.ErrNotAgent) {
			return nil, notRecoverable("%v", err)
		}
		return nil, fmt.Errorf("recover docker session %s: %w", h.ID, err)
	}
	s := e.newSession(h.ID, data.Container, hello.Workdir, client, h.Data, nil)
	e.live.Done(h.ID, s)
	return e.wrap(s), nil
}

// Sweep removes every job container of this runner (by its labels) whose
// run is not in keep and that no live session holds. Errors of single
// containers are joined.
func (e *Executor) Sweep(ctx context.Context, keep []string) error {
	list, err := e.list(ctx)
	if err != nil {
		return fmt.Errorf("sweep job containers: %w", err)
	}
	var errs []error
	for _, c := range list {
		run := c.Labels[LabelRun]
		if e.live.Holds(run) || slices.Contains(keep, run) {
			continue
		}
		if err := e.removeContainer(ctx, c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		e.log.Info("removed a job container no run of this runner holds", "container", short(c.ID), "run", run)
	}
	return errors.Join(errs...)
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
