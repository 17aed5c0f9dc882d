package docker

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/stdcopy"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/units"
)

// LabelService names the service a container is of (its value); the job
// container has none.
const LabelService = "knotless.dev/service"

// serviceContainerName is service name's container beside job container
// jobName: JOBNAME-service-NAME.
func serviceContainerName(jobName, name string) string { return jobName + "-service-" + name }

// serviceFor returns service s's container config, hardened exactly as
// the job's (containerFor: the same user, read-only root file system,
// CapDrop ALL, no-new-privileges, private IPC, --pids, runtime, no host
// path at all), in the job container's network namespace (NetworkMode
// container:JOB, so the steps reach it at 127.0.0.1), with its own limits
// (memory with no swap, NanoCPUs), a tmpfs /tmp of its memory and, when it
// asks for secrets, a tmpfs executor.ServiceSecretsDir (0700, the user's)
// that only it mounts. Its Env holds the workflow's plain variables, its
// command is agentenv.ServiceCommand: nothing secret is in it.
func serviceFor(s executor.Service, r executor.Resources, job containerSpec, jobID string) (*container.Config, *container.HostConfig) {
	var env []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range s.Env {
			if !yield(k) {
				return
			}
		}
	}) {
		env = append(env, k+"="+s.Env[k])
	}
	labels := map[string]string{}
	for k, v := range job.Labels {
		labels[k] = v
	}
	labels[LabelService] = s.Name
	cfg := &container.Config{
		Image:       s.Image,
		User:        userOf(job.RunAs),
		Env:         env,
		Labels:      labels,
		StopSignal:  "SIGTERM",
		StopTimeout: ptr(2),
	}
	if cmd := agentenv.ServiceCommand(s); len(cmd) > 0 {
		cfg.Entrypoint, cfg.Cmd = cmd[:1], cmd[1:]
	}
	hc := hardened(job, container.NetworkMode("container:"+jobID), r.MilliCPUs*1e6, r.Memory)
	if len(s.Secrets) > 0 {
		hc.Tmpfs[executor.ServiceSecretsDir] = fmt.Sprintf("rw,noexec,nosuid,nodev,size=1m,mode=0700,uid=%d,gid=%d", job.RunAs.UID, job.RunAs.GID)
	}
	return cfg, hc
}

// serviceImages makes sure every service's image is on the engine
// (ensureImage), before the job's container is made: one that cannot be
// pulled is image-pull, naming the service.
func (e *Executor) serviceImages(ctx context.Context, spec executor.Spec) error {
	for _, s := range spec.Services {
		if _, err := e.caps.ServiceResources(s); err != nil {
			return err
		}
		if _, err := e.ensureImage(ctx, spec, s.Image); err != nil {
			if f, ok := err.(*executor.Fault); ok {
				return &executor.Fault{Reason: f.Reason, Message: "service " + s.Name + ": " + f.Message}
			}
			return fmt.Errorf("service %s: %w", s.Name, err)
		}
	}
	return nil
}

// startServices creates and starts spec's services (their images present:
// serviceImages) beside the started job container jobID (named jobName). It writes each to spec.Log. On error the services made so far
// are left for the caller's removeServices.
func (e *Executor) startServices(ctx context.Context, spec executor.Spec, job containerSpec, jobID, jobName string) error {
	for _, s := range spec.Services {
		r, err := e.caps.ServiceResources(s)
		if err != nil {
			return err
		}
		cfg, hc := serviceFor(s, r, job, jobID)
		name := serviceContainerName(jobName, s.Name)
		created, err := e.api.ContainerCreate(ctx, cfg, hc, nil, nil, name)
		if errdefs.IsConflict(err) {
			_ = e.api.ContainerRemove(context.WithoutCancel(ctx), name, container.RemoveOptions{Force: true, RemoveVolumes: true})
			created, err = e.api.ContainerCreate(ctx, cfg, hc, nil, nil, name)
		}
		if err != nil {
			return &executor.Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf("service %s: the engine refused its container: %v", s.Name, err)}
		}
		if err := e.api.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
			return &executor.Fault{Reason: api.ReasonService, Message: fmt.Sprintf("service %s (image %s) could not start: %v", s.Name, s.Image, err)}
		}
		e.logf(spec, "service %s: container %s from image %s: cpus %s, memory %s (no swap), the job's user and hardening, in the job container's network (127.0.0.1)",
			s.Name, name, s.Image, executor.FormatCPUs(r.MilliCPUs), units.FormatSize(r.Memory))
	}
	return nil
}

// serviceList returns the service containers of job container jobName's
// run, running or not.
func (e *Executor) serviceList(ctx context.Context, jobName string) ([]container.Summary, error) {
	list, err := e.api.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", agentenv.LabelManagedBy+"="+agentenv.ManagedBy),
		filters.Arg("label", LabelService),
		filters.Arg("name", "^/?"+jobName+"-service-"),
	)})
	return list, err
}

// removeServices removes the service containers of job container
// jobName; gone ones are no error.
func (e *Executor) removeServices(ctx context.Context, jobName string) error {
	list, err := e.serviceList(ctx, jobName)
	if err != nil {
		return fmt.Errorf("list the services of %s: %w", jobName, err)
	}
	var errs []error
	for _, c := range list {
		if err := e.removeContainer(ctx, c.ID); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("remove services: %v", errs)
	}
	return nil
}

// serviceFault is why a service of job container jobName stopped: a
// container that no longer runs (service, with its exit code; OOM named),
// nil while all run.
func (e *Executor) serviceFault(ctx context.Context, jobName string) *executor.Fault {
	list, err := e.serviceList(ctx, jobName)
	if err != nil {
		return nil
	}
	for _, c := range list {
		if c.State == container.StateRunning {
			continue
		}
		name := c.Labels[LabelService]
		st, err := e.api.ContainerInspect(ctx, c.ID)
		if err != nil || st.State == nil {
			continue
		}
		if st.State.Running {
			continue
		}
		msg := fmt.Sprintf("service %s (image %s) exited with code %d", name, c.Image, st.State.ExitCode)
		if st.State.OOMKilled {
			msg = fmt.Sprintf("service %s (image %s) was killed for exceeding its memory limit", name, c.Image)
		}
		if st.State.Error != "" {
			msg += ": " + st.State.Error
		}
		return &executor.Fault{Reason: api.ReasonService, Message: msg + "; its log is in the setup log"}
	}
	return nil
}

// containerServices is the agentenv.Services of one job container.
type containerServices struct {
	e       *Executor
	job     string // the job container's ID
	jobName string
	user    string
}

// Exec implements agentenv.Services: an exec as the job's user.
func (c containerServices) Exec(ctx context.Context, name string, argv []string, stdin []byte) ([]byte, int, error) {
	id := c.job
	if name != "" {
		id = serviceContainerName(c.jobName, name)
	}
	ex, err := c.e.api.ContainerExecCreate(ctx, id, container.ExecOptions{
		User: c.user, Cmd: argv, AttachStdin: stdin != nil, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return nil, -1, fmt.Errorf("create an exec in %s: %w", id, err)
	}
	hj, err := c.e.api.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, -1, fmt.Errorf("attach to an exec in %s: %w", id, err)
	}
	defer hj.Close()
	if stdin != nil {
		if _, err := hj.Conn.Write(stdin); err != nil {
			return nil, -1, fmt.Errorf("write to an exec in %s: %w", id, err)
		}
		_ = hj.CloseWrite()
	}
	out := &agentenv.CappedBuffer{Max: 64 << 10}
	if _, err := stdcopy.StdCopy(out, out, hj.Reader); err != nil {
		return out.Bytes(), -1, err
	}
	for range 50 {
		in, err := c.e.api.ContainerExecInspect(ctx, ex.ID)
		if err != nil {
			return out.Bytes(), -1, err
		}
		if !in.Running {
			return out.Bytes(), in.ExitCode, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return out.Bytes(), -1, fmt.Errorf("the exec in %s did not end after its output did", id)
}

// Log implements agentenv.Services: the container's log (its last 2000
// lines, then at most max bytes).
func (c containerServices) Log(ctx context.Context, name string, max int64) ([]byte, error) {
	rc, err := c.e.api.ContainerLogs(ctx, serviceContainerName(c.jobName, name), container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "2000"})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var b bytes.Buffer
	if _, err := stdcopy.StdCopy(&b, &b, rc); err != nil {
		return nil, err
	}
	out := b.Bytes()
	if int64(len(out)) > max {
		out = out[int64(len(out))-max:]
	}
	return out, nil
}
