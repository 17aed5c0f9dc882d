package docker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/errdefs"
	"golang.org/x/sys/unix"
	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/units"
)

// driver is the docker executor's agentenv.Driver: an environment is a
// job container with the agent as its PID 1.
type driver Executor

// Make makes the run's container (containerFor: hardened, one per run,
// never reused) after the disk floor allows it (jobContainer), and starts
// it with the agent as PID 1 (startJob), then its builder and services.
// The checkout at spec.Workspace is bind-mounted as agentenv.Workspace
// (nothing is copied), and given to the container's user at the
// session's first Exec, CopyIn or CopyOut, when the checkout is complete
// (executor.Executor.Prepare; never under `knotless-run exec`). A session
// recovered by a later runner process does not give it again (its steps
// may be running, and could swap a directory for a link under the walk):
// a runner that died between Prepare and the first step leaves a run
// whose steps cannot write to the checkout. It writes to spec.Log the
// container, image, limits, user and network. Caches move by the host's
// file system for the checkout (hostCaches).
//
// A builds run (spec.ContainerBuilds) is refused before anything is made
// when the runner has no --builder-image (refuseBuilds); otherwise its
// builder's volumes are made before the job container, which mounts the
// share read-only at BuilderShare, and the builder is started beside it
// (startBuilder) and ready before Make returns.
//
// Errors: a workflow asking for more than the runner allows; an image
// that is neither present nor pullable (a *executor.Fault with reason
// image-pull and the engine's message); an engine that refuses the
// container (reason executor, its message); a builder that does not
// answer. On error the containers and volumes made are removed.
func (d *driver) Make(ctx context.Context, spec executor.Spec, serve agent.Serve) (*agentenv.Env, error) {
	e := (*Executor)(d)
	name := containerName(e.cfg.Runner, spec.ID)
	job, build, err := e.jobContainer(ctx, spec, serve)
	if err != nil {
		return nil, err
	}
	id, err := e.startJob(ctx, job, build, name)
	if err != nil {
		return nil, err
	}
	pids := "none"
	if e.cfg.Pids > 0 {
		pids = fmt.Sprint(e.cfg.Pids)
	}
	e.logf(spec, "container %s (%s) from image %s: cpus %s, memory %s (no swap), pids %s, runtime %s, user %s, network %s, read-only root file system, all capabilities dropped",
		name, short(id), job.Image, executor.FormatCPUs(job.NanoCPUs/1e6), units.FormatSize(job.Memory), pids, cmp.Or(e.cfg.Runtime, "default"), userOf(job.RunAs), job.Network)
	if build != nil {
		if err := e.startBuilder(ctx, spec, *build, job, id, name); err != nil {
			e.removeContainer(context.WithoutCancel(ctx), id)
			_ = e.removeBuilder(context.WithoutCancel(ctx), name)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
	}
	if len(spec.Services) > 0 {
		if err := e.startServices(ctx, spec, job, id, name); err != nil {
			_ = e.removeServices(context.WithoutCancel(ctx), name)
			e.removeContainer(context.WithoutCancel(ctx), id)
			_ = e.removeBuilder(context.WithoutCancel(ctx), name)
			return nil, err
		}
	}
	runAs := job.RunAs
	env := e.env(id, userOf(runAs), name)
	if !e.cfg.Ephemeral {
		// The checkout is complete by the first Exec, CopyIn or CopyOut
		// (executor.Executor.Prepare), and no step has run yet: nothing in
		// the container can swap a directory for a link while the tree is
		// walked.
		ws := spec.Workspace
		env.AddHooks(agentenv.Hooks{Ready: func(context.Context, *agentenv.Session) error { return chownTree(ws, runAs) }})
	}
	env.AddHooks(agentenv.Hooks{Attached: func(_ context.Context, _ *agent.Client, hello agent.AgentHello) error {
		hostCaches(env, hello.Workdir, spec.Workspace, runAs)
		return nil
	}})
	return env, nil
}

// jobContainer checks spec and readies what its job container needs, and
// returns the container to make (and its builder's, for a builds run):
// the workspace, the resources within the runner's caps, the host's
// architecture, builds allowed; then it waits for the disk floor, makes
// the runner's network, has the image (and the services' and builder's)
// present, reads the image's user for --run-as image, and checks that a
// `knotless-run exec` user's checkout can be entered. It makes no
// container. Errors: Make's, before anything of the run exists.
func (e *Executor) jobContainer(ctx context.Context, spec executor.Spec, serve agent.Serve) (containerSpec, *builderSpec, error) {
	fail := func(err error) (containerSpec, *builderSpec, error) { return containerSpec{}, nil, err }
	if spec.Workspace == "" {
		return fail(errors.New("no workspace: the checkout is bind-mounted from the runner's disk"))
	}
	img, res, err := e.caps.ImageAndResources(spec, e.cfg.Image)
	if err != nil {
		return fail(err)
	}
	if err := agentenv.CheckHostArch(spec); err != nil {
		return fail(err)
	}
	if spec.ContainerBuilds && e.cfg.BuilderImage == "" {
		return fail(e.refuseBuilds())
	}
	if err := e.waitDisk(ctx, spec); err != nil {
		return fail(err)
	}
	netName, err := e.network(ctx)
	if err != nil {
		return fail(err)
	}
	inspect, err := e.ensureImage(ctx, spec, img)
	if err != nil {
		return fail(err)
	}
	if err := e.serviceImages(ctx, spec); err != nil {
		return fail(err)
	}
	var build *builderSpec
	if spec.ContainerBuilds {
		if build, err = e.prepareBuilder(ctx, spec); err != nil {
			return fail(err)
		}
		serve.PathAppend = BuilderShare + "/bin"
	}
	runAs := e.cfg.RunAs
	if runAs.Image {
		if runAs, err = imageUser(img, inspect.Config.User); err != nil {
			return fail(&executor.Fault{Reason: api.ReasonExecutor, Message: err.Error()})
		}
	}
	if e.cfg.Ephemeral {
		// `knotless-run exec` runs in a person's own work tree: it is
		// never given away; steps may write where its modes let them.
		if err := e.checkOwnTree(spec, runAs); err != nil {
			return fail(err)
		}
	}
	labels := map[string]string{agentenv.LabelManagedBy: agentenv.ManagedBy, agentenv.LabelExecutor: Name, agentenv.LabelRunner: e.cfg.Runner, agentenv.LabelRun: spec.ID}
	for k, v := range spec.Labels {
		if _, ok := labels[k]; !ok {
			labels[k] = v
		}
	}
	return containerSpec{
		Image: img, Labels: labels, RunAs: runAs, NanoCPUs: res.MilliCPUs * 1e6, Memory: res.Memory,
		Pids: e.cfg.Pids, Runtime: e.cfg.Runtime, Network: netName,
		Agent: e.cfg.Agent, Workspace: spec.Workspace,
		Cmd: append([]string{AgentPath}, agentenv.ContainerServe(serve).Args()...),
	}, build, nil
}

// startJob makes job's container under name (a builds run's builder
// volumes first, its share mounted read-only at BuilderShare) and starts
// it; a container of an earlier process under that name, which no session
// holds, is removed and made again. It returns the container's ID. On
// error what it made is removed: the engine's refusal is a
// *executor.Fault with reason executor and its message.
func (e *Executor) startJob(ctx context.Context, job containerSpec, build *builderSpec, name string) (string, error) {
	if build != nil {
		if err := e.makeBuilderVolumes(ctx, build, name, job.Labels); err != nil {
			_ = e.removeBuilder(context.WithoutCancel(ctx), name)
			return "", err
		}
	}
	cfg, hc := containerFor(job)
	hc.AutoRemove = e.cfg.Ephemeral
	if build != nil {
		// The volume is made here, before the builder that fills it.
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Source: build.Share, Target: BuilderShare, ReadOnly: true})
	}
	created, err := e.api.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if err != nil {
		if errdefs.IsConflict(err) {
			// A container of an earlier process under this name, which no
			// session holds: it is this runner's to remove.
			_ = e.api.ContainerRemove(context.WithoutCancel(ctx), name, container.RemoveOptions{Force: true, RemoveVolumes: true})
			created, err = e.api.ContainerCreate(ctx, cfg, hc, nil, nil, name)
		}
		if err != nil {
			if build != nil {
				_ = e.removeBuilder(context.WithoutCancel(ctx), name)
			}
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return "", &executor.Fault{Reason: api.ReasonExecutor, Message: "the engine refused the job container: " + err.Error()}
		}
	}
	id := created.ID
	if err := e.api.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		e.removeContainer(context.WithoutCancel(ctx), id)
		if build != nil {
			_ = e.removeBuilder(context.WithoutCancel(ctx), name)
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", &executor.Fault{Reason: api.ReasonExecutor, Message: "the engine could not start the job container: " + err.Error()}
	}
	return id, nil
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
	return e.env(h.Container, h.User, strings.TrimPrefix(st.Name, "/")), nil
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
		out = append(out, agentenv.Listed{ID: c.Labels[agentenv.LabelRun], Name: "container " + short(id),
			Remove: func(ctx context.Context) error { return e.removeContainer(ctx, id) }})
	}
	// A builder's volumes outlive their containers when a runner died
	// between the two removals: listed by their run, as the containers.
	vols, err := e.builderVolumes(ctx)
	if err != nil {
		return nil, err
	}
	for _, v := range vols {
		name := v.Name
		out = append(out, agentenv.Listed{ID: v.Labels[agentenv.LabelRun], Name: "volume " + name, After: true,
			Remove: func(ctx context.Context) error {
				if err := e.api.VolumeRemove(ctx, name, true); err != nil && !errdefs.IsNotFound(err) {
					return fmt.Errorf("remove volume %s: %w", name, err)
				}
				return nil
			}})
	}
	return out, nil
}

// prepareBuilder is a builds run's builderSpec (but its volumes): the
// builder image, present or pulled (image-pull names --builder-image),
// and the host id range of its daemon (builderIDs).
func (e *Executor) prepareBuilder(ctx context.Context, spec executor.Spec) (*builderSpec, error) {
	if _, err := e.ensureImage(ctx, spec, e.cfg.BuilderImage); err != nil {
		if f, ok := err.(*executor.Fault); ok {
			return nil, &executor.Fault{Reason: f.Reason, Message: "the builder image (--builder-image): " + f.Message}
		}
		return nil, err
	}
	ids, err := e.builderIDs(ctx)
	if err != nil {
		return nil, err
	}
	return &builderSpec{Image: e.cfg.BuilderImage, HostIDs: ids}, nil
}

// env is container id as an environment (containerEnvironment). A step's
// Note says when it reached the process limit. Its services are the
// containers named after name, the job container's (removed with it).
func (e *Executor) env(id, user, name string) *agentenv.Env {
	return &agentenv.Env{
		Environment: containerEnvironment{e: e, id: id, user: user, name: name,
			connect: append([]string{AgentPath}, agent.Connect{Socket: AgentSocket, Wait: 10 * time.Second}.Args()...)},
		Name:      "container " + short(id),
		Data:      handleData{Container: id, User: user},
		Services:  containerServices{e: e, job: id, jobName: name, user: user},
		AgentPath: AgentPath,
		Hooks: agentenv.Hooks{AroundStep: func() func(*executor.Result) {
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
		}},
	}
}

// containerEnvironment is job container id (named name) as an
// agentenv.Environment: each dial is a new exec of `knotless-agent
// connect` (connect) as user; a container that is gone or no longer
// running makes a dial fail with agent.ErrGone, and says why
// (containerFault, then the builder's builderFault, then a service's
// serviceFault); Remove removes its services, itself and its builder.
type containerEnvironment struct {
	e              *Executor
	id, user, name string
	connect        []string
}

func (c containerEnvironment) Dial(ctx context.Context) (io.ReadWriteCloser, error) {
	st, err := c.e.api.ContainerInspect(ctx, c.id)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("%w: the job container %s is gone", agent.ErrGone, short(c.id))
	}
	if err == nil && (st.State == nil || !st.State.Running) {
		return nil, fmt.Errorf("%w: %s", agent.ErrGone, stateMessage(st))
	}
	return c.e.openStream(ctx, c.id, c.user, c.connect)
}

func (c containerEnvironment) Why(ctx context.Context) *executor.Fault {
	if f := c.e.containerFault(ctx, c.id); f != nil {
		return f
	}
	if f := c.e.builderFault(ctx, c.name); f != nil {
		return f
	}
	return c.e.serviceFault(ctx, c.name)
}

func (c containerEnvironment) Remove(ctx context.Context, _ bool) error {
	// The builder's volumes go once no container mounts them.
	return errors.Join(c.e.removeServices(ctx, c.name), c.e.removeContainer(ctx, c.id), c.e.removeBuilder(ctx, c.name))
}

// checkOwnTree checks that the job's user can enter and read a checkout
// that stays its owner's (`knotless-run exec`): one it cannot enter would
// fail every step with "start /bin/sh: permission denied". The error names
// the directory, its owner and mode, and what to do. A checkout of
// another owner that it can enter is noted in the setup log.
func (e *Executor) checkOwnTree(spec executor.Spec, runAs RunAs) error {
	var st unix.Stat_t
	if unix.Stat(spec.Workspace, &st) != nil || int64(st.Uid) == runAs.UID {
		return nil
	}
	mode := st.Mode & 0o777
	bits := mode & 0o7 // others
	if int64(st.Gid) == runAs.GID {
		bits = (mode >> 3) & 0o7
	}
	if bits&0o5 != 0o5 {
		do := fmt.Sprintf("give --run-as %d:%d (its owner), or let others enter and read it (chmod o+rx %s)", st.Uid, st.Gid, spec.Workspace)
		if st.Uid == 0 {
			do = fmt.Sprintf("job containers never run as root: let others enter and read it (chmod o+rx %s), or run from a copy you own", spec.Workspace)
		}
		return &executor.Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf("the checkout %s belongs to UID %d (mode %04o), and steps run as %s, which cannot enter it: %s",
			spec.Workspace, st.Uid, mode, userOf(runAs), do)}
	}
	hint := fmt.Sprintf(" (--run-as %d:%d runs them as its owner)", st.Uid, st.Gid)
	if st.Uid == 0 {
		hint = " (job containers never run as root)"
	}
	e.logf(spec, "the checkout %s belongs to UID %d and stays so; steps run as %s and write to it only where its modes allow%s", spec.Workspace, st.Uid, userOf(runAs), hint)
	return nil
}
