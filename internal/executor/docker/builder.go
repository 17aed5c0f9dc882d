package docker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/stdcopy"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/builder"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/units"
)

// Container builds (a workflow's `container-builds: true`,
// docs/container-builds.md) get a builder beside the job container, as
// a kube builds pod gets its sidecar: a container of Config.BuilderImage
// running knotless-builder, which runs BuildKit's daemon in a user and
// mount namespace of its own. It shares a volume with the job container
// at BuilderShare (bin/buildctl, on the steps' PATH, and the daemon's
// socket at BuildKit's default address) and the job container's network
// namespace (a build's RUN reaches what a step reaches, no more). Without
// a builder image the executor refuses builds before any container
// exists; ordinary runs never get a builder.
//
// Docker gives no container a user namespace of its own (only the
// engine-wide userns-remap, or a rootless engine). On an engine without
// either, the container's root is the host's: knotless-builder then maps
// the daemon's uids 0-65535 to a range of the host's that no one uses
// (builderIDs) and drops to that range's first uid once the daemon runs,
// so the build's root is an unprivileged host uid, as on kube, and no
// process of the host's root stays in the container. On an engine with
// userns-remap (or a rootless one) the container's root is already
// remapped, and knotless-builder maps the container's ids to themselves,
// as in a kube pod (not tested yet: the tests' engine has neither).

const (
	// BuilderShare is where the builder's socket and client are, in the
	// builder's container and the job's: buildctl's default address is
	// unix:///run/buildkit/buildkitd.sock, and steps find buildctl in
	// BuilderShare/bin (the agent's --path-append), as on kube.
	BuilderShare = "/run/buildkit"
	// LabelBuilder marks a run's builder container and its volumes; on
	// the container its value is the first host uid of its range (0: the
	// engine's userns-remap).
	LabelBuilder = "knotless.dev/builder"
	// builderState is the daemon's state directory in the builder.
	builderState = "/var/lib/buildkit"
)

// Host uid ranges of builders on an engine without userns-remap: slots of
// builder.HostIDsSize ids from 2^30 up to 2^31 (the engine refuses a
// container user of 2^31 and above), 16,384 of them; far above any
// account's uid and /etc/subuid's usual 100000.
const (
	builderIDsBase  = 1 << 30
	builderIDsSlots = (1<<31 - builderIDsBase) / builder.HostIDsSize
)

// builderName is job container jobName's builder: JOBNAME-builder; its
// volumes are JOBNAME-builder-share and JOBNAME-builder-state.
func builderName(jobName string) string { return jobName + "-builder" }

// builderSpec is what builderFor needs beside the job's containerSpec.
type builderSpec struct {
	Image string
	// HostIDs is the first host uid and gid of the daemon's namespace
	// (knotless-builder --host-ids), or 0 on an engine with userns-remap.
	HostIDs int
	// Share and State are the run's two volumes.
	Share, State string
}

// builderFor returns the builder container's config: knotless-builder
// as the container's root (0:0, and PID 1: it reaps and passes signals)
// running `buildkitd --root=/var/lib/buildkit/root`, in the job
// container's network namespace, with the job's cpu, memory (no swap),
// pids limit and runtime (its build steps run in it). It is not
// privileged; capabilities are all dropped but SETUID, SETGID and SETFCAP
// (to write the daemon's namespace's maps); no-new-privileges; seccomp is
// the profile this project ships (builder.SeccompProfile, the one
// deploy/kubernetes/builds installs for kube: RuntimeDefault plus mount,
// unshare, setns, pivot_root, ... for the nested namespace); /proc is
// unmasked (empty MaskedPaths and ReadonlyPaths, what the CLI's
// systempaths=unconfined sends: kube's procMount Unmasked; a build
// step mounts a /proc of its own, which the kernel allows only where no
// path of the container's /proc is masked); AppArmor is the engine's
// default (no option). Its root file system is read-only: the state is
// the State volume on the engine's data disk (the workflow's disk: is not
// enforced, as for the job's own checkout), /tmp and /run are tmpfs. No
// Env, no secret: the argv is fixed but for the id range.
func builderFor(b builderSpec, job containerSpec, jobID string) (*container.Config, *container.HostConfig) {
	args := []string{"--share=" + BuilderShare}
	if b.HostIDs > 0 {
		args = append(args, "--host-ids="+strconv.Itoa(b.HostIDs), "--own="+builderState, "--own=/tmp", "--own=/run")
	} else {
		args = append(args, "--open-socket")
	}
	args = append(args, "--", "buildkitd", "--root="+builderState+"/root")
	labels := map[string]string{}
	for k, v := range job.Labels {
		labels[k] = v
	}
	labels[LabelBuilder] = strconv.Itoa(b.HostIDs)
	cfg := &container.Config{
		Image:       b.Image,
		User:        "0:0",
		Cmd:         args,
		Labels:      labels,
		StopSignal:  "SIGTERM",
		StopTimeout: ptr(2),
	}
	hc := hardened(job, container.NetworkMode("container:"+jobID), job.NanoCPUs, job.Memory)
	hc.CapAdd = []string{"SETUID", "SETGID", "SETFCAP"}
	hc.SecurityOpt = append(hc.SecurityOpt, "seccomp="+builder.SeccompProfile)
	// What the CLI's --security-opt systempaths=unconfined sends: empty,
	// not absent, lists (absent means the engine's defaults).
	hc.MaskedPaths, hc.ReadonlyPaths = []string{}, []string{}
	hc.Tmpfs["/run"] = "rw,nosuid,nodev,noexec,size=16m"
	hc.Mounts = []mount.Mount{
		{Type: mount.TypeVolume, Source: b.Share, Target: BuilderShare},
		{Type: mount.TypeVolume, Source: b.State, Target: builderState},
	}
	return cfg, hc
}

// refuseBuilds is the fault of a builds run on a runner without
// --builder-image: before any container exists, naming the flag
// (unsupported: never retried).
func (e *Executor) refuseBuilds() error {
	return &executor.Fault{Reason: api.ReasonUnsupported, Message: fmt.Sprintf(
		"this workflow asks for container-builds: true, and runner %s does not allow image builds: its operator gives the docker executor --builder-image IMAGE (docs/container-builds.md)",
		strings.TrimSpace(e.cfg.Runner))}
}

// builderIDs chooses the builder's host id range: 0 on an engine with
// userns-remap or a rootless one (the container's root is already not
// the host's), else a
// random slot of builderIDsBase.. that no builder on the engine holds
// (their LabelBuilder). Errors: the engine's info or list.
func (e *Executor) builderIDs(ctx context.Context) (int, error) {
	info, err := e.api.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("ask the engine whether it remaps users: %w", err)
	}
	for _, o := range info.SecurityOptions {
		// Both put every container in a user namespace whose root is
		// not the host's (and whose 65,536 ids are all it can map).
		if strings.HasPrefix(o, "name=userns") || strings.HasPrefix(o, "name=rootless") {
			return 0, nil
		}
	}
	list, err := e.api.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", agentenv.LabelManagedBy+"="+agentenv.ManagedBy), filters.Arg("label", LabelBuilder))})
	if err != nil {
		return 0, fmt.Errorf("list the engine's builders: %w", err)
	}
	used := map[int]bool{}
	for _, c := range list {
		n, _ := strconv.Atoi(c.Labels[LabelBuilder])
		used[n] = true
	}
	for range 64 {
		if ids := builderIDsBase + rand.IntN(builderIDsSlots)*builder.HostIDsSize; !used[ids] {
			return ids, nil
		}
	}
	return 0, errors.New("no free host id range for the builder")
}

// makeBuilderVolumes names and makes b's two volumes for job container
// jobName, labelled as it (jobLabels) and LabelBuilder, so that a sweep
// finds them: before the job container, which would otherwise make the
// share unlabelled by mounting it.
func (e *Executor) makeBuilderVolumes(ctx context.Context, b *builderSpec, jobName string, jobLabels map[string]string) error {
	b.Share, b.State = builderName(jobName)+"-share", builderName(jobName)+"-state"
	labels := map[string]string{LabelBuilder: strconv.Itoa(b.HostIDs)}
	for k, v := range jobLabels {
		labels[k] = v
	}
	for _, v := range []string{b.Share, b.State} {
		if _, err := e.api.VolumeCreate(ctx, volume.CreateOptions{Name: v, Labels: labels}); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &executor.Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf("the engine refused the builder's volume %s: %v", v, err)}
		}
	}
	return nil
}

// startBuilder starts the run's builder (builderFor; its volumes made:
// makeBuilderVolumes) beside the started job container jobID (named
// jobName) and waits until its daemon answers (builderReady). It writes
// the builder to spec.Log. On error what it made is left for
// removeBuilder.
func (e *Executor) startBuilder(ctx context.Context, spec executor.Spec, b builderSpec, job containerSpec, jobID, jobName string) error {
	cfg, hc := builderFor(b, job, jobID)
	name := builderName(jobName)
	created, err := e.api.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if errdefs.IsConflict(err) {
		_ = e.api.ContainerRemove(context.WithoutCancel(ctx), name, container.RemoveOptions{Force: true, RemoveVolumes: true})
		created, err = e.api.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	}
	if err != nil {
		return &executor.Fault{Reason: api.ReasonExecutor, Message: "the engine refused the builder's container: " + err.Error()}
	}
	if err := e.api.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return &executor.Fault{Reason: api.ReasonExecutor, Message: "the engine could not start the builder: " + err.Error()}
	}
	root := fmt.Sprintf("host uids %d-%d (knotless-builder maps them and drops to the first: the container's root is the host's on this engine)", b.HostIDs, b.HostIDs+builder.HostIDsSize-1)
	if b.HostIDs == 0 {
		root = "the container's root, remapped by the engine (userns-remap)"
	}
	e.logf(spec, "builder: container %s from image %s: cpus %s, memory %s (no swap), pids as the job's (its build steps run in it); BuildKit in a user namespace of its own whose root is %s; not privileged, capabilities SETUID, SETGID, SETFCAP only, no-new-privileges, seccomp the builder profile, /proc unmasked, read-only root file system; the job container's network; buildctl on the steps' PATH, its socket at %s/buildkitd.sock",
		name, b.Image, executor.FormatCPUs(job.NanoCPUs/1e6), units.FormatSize(job.Memory), root, BuilderShare)
	t0 := time.Now()
	if err := e.builderReady(ctx, created.ID, b.HostIDs); err != nil {
		return err
	}
	e.logf(spec, "builder ready after %s", time.Since(t0).Round(time.Millisecond))
	return nil
}

// builderReady waits (at most two minutes) until `buildctl debug
// workers` answers in builder id, as the daemon's own host uid (never as
// the host's root). A builder that stops is an executor fault with the
// end of its log.
func (e *Executor) builderReady(ctx context.Context, id string, hostIDs int) error {
	user := fmt.Sprintf("%d:%d", hostIDs, hostIDs)
	probe := containerServices{e: e, job: id, user: user}
	deadline := time.Now().Add(2 * time.Minute)
	var last []byte
	for {
		if f := e.builderStopped(ctx, id); f != nil {
			return f
		}
		out, code, err := probe.Exec(ctx, "", []string{"buildctl", "--addr", "unix://" + BuilderShare + "/buildkitd.sock", "debug", "workers"}, nil)
		if err == nil && code == 0 {
			return nil
		}
		last = out
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return &executor.Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf("the builder's BuildKit did not answer within two minutes: %s", strings.TrimSpace(string(last)))}
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// builderStopped is the fault of builder container id when it no longer
// runs: executor, with its exit code and the end of its log.
func (e *Executor) builderStopped(ctx context.Context, id string) *executor.Fault {
	st, err := e.api.ContainerInspect(ctx, id)
	if err != nil || st.State == nil || st.State.Running {
		return nil
	}
	msg := fmt.Sprintf("the builder (image %s) exited with code %d", st.Config.Image, st.State.ExitCode)
	if st.State.OOMKilled {
		msg = fmt.Sprintf("the builder (image %s) was killed for exceeding the job's memory limit", st.Config.Image)
	}
	if rc, err := e.api.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "5"}); err == nil {
		var b strings.Builder
		_, _ = stdcopy.StdCopy(&b, &b, rc)
		rc.Close()
		if s := strings.TrimSpace(b.String()); s != "" {
			msg += ": " + s
		}
	}
	return &executor.Fault{Reason: api.ReasonExecutor, Message: msg}
}

// builderFault is why job container jobName's builder stopped, nil while
// it runs or when the run has none.
func (e *Executor) builderFault(ctx context.Context, jobName string) *executor.Fault {
	return e.builderStopped(ctx, builderName(jobName))
}

// removeBuilder removes job container jobName's builder and its volumes;
// gone ones are no error. The job container must be gone first (it
// mounts the share volume).
func (e *Executor) removeBuilder(ctx context.Context, jobName string) error {
	name := builderName(jobName)
	err := e.removeContainer(ctx, name)
	for _, v := range []string{name + "-share", name + "-state"} {
		if verr := e.api.VolumeRemove(ctx, v, true); verr != nil && !errdefs.IsNotFound(verr) {
			err = errors.Join(err, fmt.Errorf("remove volume %s: %w", v, verr))
		}
	}
	return err
}

// builderVolumes returns this runner's builder volumes (by their labels)
// and the run each is of: what a sweep removes when no container of its
// run is left.
func (e *Executor) builderVolumes(ctx context.Context) ([]volume.Volume, error) {
	res, err := e.api.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", agentenv.LabelManagedBy+"="+agentenv.ManagedBy),
		filters.Arg("label", agentenv.LabelRunner+"="+e.cfg.Runner),
		filters.Arg("label", LabelBuilder))})
	if err != nil {
		return nil, fmt.Errorf("list the builders' volumes: %w", err)
	}
	var out []volume.Volume
	for _, v := range res.Volumes {
		if v != nil {
			out = append(out, *v)
		}
	}
	slices.SortFunc(out, func(a, b volume.Volume) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
