package docker_test

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"knotless.dev/knotless/internal/builder"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/docker"
	"knotless.dev/knotless/internal/testwait"
)

// buildsConfig is config with builds allowed (the builder image made of
// the local cluster's BuildKit: dockertest's BuilderImage) and room for
// BuildKit: the builder gets the job's cpu, memory and pids.
func (f *fixture) buildsConfig(t *testing.T) docker.Config {
	cfg := f.config()
	cfg.BuilderImage = f.eng.BuilderImage(t)
	cfg.Memory = 512 << 20
	cfg.Pids = 1024
	return cfg
}

// buildContext writes a Dockerfile with two stages, ARG, RUN (as the
// build's root, saying its uid and its user namespace's map, and as USER
// 1000), COPY --from, and the static busybox it needs (no image can be
// pulled: the stages are FROM scratch) into dir.
func buildContext(t *testing.T, dir string) {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("the build context's busybox: %v (install busybox-static)", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	dockerfile := `FROM scratch AS build
COPY busybox /bin/busybox
ARG GREETING=hello
RUN ["/bin/busybox", "sh", "-c", "/bin/busybox mkdir -p /out && echo \"$GREETING from uid $(/bin/busybox id -u)\" > /out/greeting && /bin/busybox cat /proc/self/uid_map > /out/uid_map"]

FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
COPY --from=build /out /out
USER 1000:1000
RUN ["/bin/busybox", "sh", "-c", "test \"$(/bin/busybox id -u)\" = 1000"]
`
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runnerLeft lists what of the runner's is still on the engine:
// containers and volumes by its label.
func (f *fixture) runnerLeft(t *testing.T, ctx context.Context) []string {
	t.Helper()
	var left []string
	list, err := f.eng.Containers(ctx, agentenv.LabelRunner+"="+f.runner)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		left = append(left, "container "+strings.Join(c.Names, ","))
	}
	vols, err := f.eng.Client.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", agentenv.LabelRunner+"="+f.runner))})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols.Volumes {
		left = append(left, "volume "+v.Name)
	}
	return left
}

// TestDocker_ContainerBuildRefusedWithoutTheFlag pins the refusal: a
// runner without --builder-image ends a builds run before any container
// or volume exists, naming the flag.
func TestDocker_ContainerBuildRefusedWithoutTheFlag(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec, _ := f.spec(t, runID("nobuild"))
	spec.ContainerBuilds = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := e.Prepare(ctx, spec)
	var fault *executor.Fault
	if !errors.As(err, &fault) || fault.Reason != "unsupported" || !strings.Contains(fault.Message, "--builder-image") || !strings.Contains(fault.Message, "container-builds: true") {
		if s != nil {
			_ = s.Cleanup(ctx)
		}
		t.Fatalf("Prepare: %v; want an executor fault naming --builder-image", err)
	}
	if left := f.runnerLeft(t, ctx); len(left) != 0 {
		t.Errorf("after the refusal the engine has: %v", left)
	}
}

// TestDocker_ContainerBuildBuildsWithoutPrivilege pins a container build
// on docker: the run's builder is not privileged, has no capability but
// SETUID, SETGID and SETFCAP, the shipped seccomp profile, /proc unmasked
// (no masked or read-only paths: systempaths=unconfined), no-new-privileges, a read-only root file
// system, and the job container's network and limits, while the job's
// container keeps every field of its hardening; a step builds a
// Dockerfile with two stages, ARG, RUN, COPY --from and USER with
// `buildctl` from its PATH into an OCI archive in the workspace; the
// build's root (uid 0 in its RUN) is host uid range the builder's label
// names, not the host's root; and the session's cleanup leaves no
// container and no volume.
func TestDocker_ContainerBuildBuildsWithoutPrivilege(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.buildsConfig(t))
	spec, log := f.spec(t, runID("build"))
	spec.ContainerBuilds = true
	buildContext(t, spec.Workspace)
	s := f.prepare(t, e, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	list, err := f.eng.Containers(ctx, agentenv.LabelRunner+"="+f.runner, docker.LabelBuilder)
	if err != nil || len(list) != 1 {
		t.Fatalf("builder containers: %v, %v", list, err)
	}
	b, err := f.eng.Client.ContainerInspect(ctx, list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	job, err := f.eng.Client.ContainerInspect(ctx, containerOf(t, s))
	if err != nil {
		t.Fatal(err)
	}
	hc := b.HostConfig
	var caps []string // the engine says CAP_SETUID for SETUID
	for _, c := range hc.CapAdd {
		caps = append(caps, strings.TrimPrefix(c, "CAP_"))
	}
	slices.Sort(caps)
	opts := map[string]string{}
	for _, o := range hc.SecurityOpt {
		k, v, _ := strings.Cut(o, "=")
		opts[k] = v
	}
	switch {
	case hc.Privileged, !hc.ReadonlyRootfs, !slices.Equal(hc.CapDrop, []string{"ALL"}), !slices.Equal(caps, []string{"SETFCAP", "SETGID", "SETUID"}),
		opts["no-new-privileges"] != "true", opts["seccomp"] != builder.SeccompProfile, hc.MaskedPaths == nil || len(hc.MaskedPaths) != 0, hc.ReadonlyPaths == nil || len(hc.ReadonlyPaths) != 0,
		len(opts) != 2, string(hc.NetworkMode) != "container:"+job.ID, hc.Memory != job.HostConfig.Memory, hc.MemorySwap != hc.Memory,
		hc.NanoCPUs != job.HostConfig.NanoCPUs, hc.PidsLimit == nil || job.HostConfig.PidsLimit == nil || *hc.PidsLimit != *job.HostConfig.PidsLimit,
		len(hc.Binds) != 0, hc.PidMode != "", hc.IpcMode != "private":
		t.Errorf("builder host config: privileged %v, read-only %v, cap drop %v add %v, security options %d (%v), masked %v read-only %v, network %s, memory %d/%d, cpus %d, pids %v, binds %v, pid %q ipc %q",
			hc.Privileged, hc.ReadonlyRootfs, hc.CapDrop, hc.CapAdd, len(hc.SecurityOpt), slices.Sorted(maps.Keys(opts)), hc.MaskedPaths, hc.ReadonlyPaths, hc.NetworkMode, hc.Memory, hc.MemorySwap, hc.NanoCPUs, hc.PidsLimit, hc.Binds, hc.PidMode, hc.IpcMode)
	}
	jh := job.HostConfig
	if jh.Privileged || !jh.ReadonlyRootfs || len(jh.CapAdd) != 0 || !slices.Equal(jh.SecurityOpt, []string{"no-new-privileges=true"}) || job.Config.User != "1000:1000" {
		t.Errorf("the job container of a builds run lost its hardening: user %s, %+v", job.Config.User, jh)
	}
	first, err := strconv.Atoi(b.Config.Labels[docker.LabelBuilder])
	if err != nil || first <= 0 {
		t.Fatalf("the builder's host id range %q: this engine has no userns-remap, so it must be one of the host's unprivileged ranges", b.Config.Labels[docker.LabelBuilder])
	}
	if !strings.Contains(log.String(), "builder ready after") {
		t.Errorf("setup log:\n%s", log)
	}

	res, out, err := runStep(t, s, executor.Step{ID: "build", Script: `set -e
command -v buildctl
buildctl build --frontend dockerfile.v0 --local context=. --local dockerfile=. --opt build-arg:GREETING=hi --output type=local,dest=out
cat out/out/greeting out/out/uid_map
buildctl build --frontend dockerfile.v0 --local context=. --local dockerfile=. --output type=oci,dest=image.tar --metadata-file meta.json
grep -o '"containerimage.digest": *"sha256:[0-9a-f]*"' meta.json
`}, 3*time.Minute)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("build step: %+v %v\n%s", res, err, out)
	}
	if !strings.Contains(string(out), "hi from uid 0") || !strings.Contains(string(out), `"containerimage.digest"`) || !strings.Contains(string(out), docker.BuilderShare+"/bin/buildctl") {
		t.Errorf("build output:\n%s", out)
	}
	// The RUN's user namespace: its uid 0 is the builder's first host uid.
	m, err := os.ReadFile(filepath.Join(spec.Workspace, "out", "out", "uid_map"))
	if fs := strings.Fields(string(m)); err != nil || len(fs) != 3 || fs[0] != "0" || fs[1] != strconv.Itoa(first) || fs[2] != strconv.Itoa(builder.HostIDsSize) {
		t.Errorf("the build's uid map %q (%v); want 0 %d %d: its root is not the host's", m, err, first, builder.HostIDsSize)
	}
	if names := tarNames(t, filepath.Join(spec.Workspace, "image.tar")); !slices.Contains(names, "index.json") || !slices.Contains(names, "oci-layout") {
		t.Errorf("image.tar is no OCI layout: %v", names)
	}

	if err := s.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if left := f.runnerLeft(t, ctx); len(left) != 0 {
		t.Errorf("the session's cleanup left: %v", left)
	}

	// An ordinary run on the same runner: no builder, no share.
	plainSpec, _ := f.spec(t, runID("plain"))
	plain := f.prepare(t, e, plainSpec)
	pj, err := f.eng.Client.ContainerInspect(ctx, containerOf(t, plain))
	if err != nil {
		t.Fatal(err)
	}
	builders, err := f.eng.Containers(ctx, agentenv.LabelRunner+"="+f.runner, docker.LabelBuilder)
	if err != nil || len(builders) != 0 || len(pj.Mounts) != 2 {
		t.Errorf("an ordinary run: builders %v (%v), job container mounts %+v; want none and the agent and checkout only", builders, err, pj.Mounts)
	}
}

// TestDocker_ContainerBuildLeftoversAreSwept pins the labels of a
// builder: what a runner that died left of a builds run (the job
// container, the builder and its two volumes) is removed by the next
// runner's sweep.
func TestDocker_ContainerBuildLeftoversAreSwept(t *testing.T) {
	f := newFixture(t)
	cfg := f.buildsConfig(t)
	spec, _ := f.spec(t, runID("build-lost"))
	spec.ContainerBuilds = true
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := f.executor(t, cfg).Prepare(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if left := f.runnerLeft(t, ctx); len(left) != 4 {
		t.Fatalf("a builds run has %v; want its job container, builder and two volumes", left)
	}
	if err := f.executor(t, cfg).Sweep(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if left := f.runnerLeft(t, ctx); len(left) != 0 {
		t.Errorf("the sweep left: %v", left)
	}
}

// tarNames lists the entries of the tar archive at path.
func tarNames(t *testing.T, path string) []string {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var names []string
	tr := tar.NewReader(fh)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		names = append(names, h.Name)
	}
}

// hostProc returns the host PID and real uid of the process whose command
// line is argv (NUL-separated), or 0 when none runs.
func hostProc(t *testing.T, argv string) (pid, uid int) {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmd, err := os.ReadFile(d + "/cmdline")
		if err != nil || strings.TrimRight(string(cmd), "\x00") != argv {
			continue
		}
		st, err := os.ReadFile(d + "/status")
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(st)) {
			if fs := strings.Fields(line); len(fs) > 1 && fs[0] == "Uid:" {
				uid, _ = strconv.Atoi(fs[1])
			}
		}
		pid, _ = strconv.Atoi(filepath.Base(d))
		return pid, uid
	}
	return 0, 0
}

// TestDocker_ContainerBuildRunIsNotHostRootAndCancelLeavesNothing pins,
// from the host's /proc, that a build's RUN (the build's root) runs as an
// unprivileged host uid, never the host's root; and that a build
// cancelled while that RUN runs ends its step cancelled, the RUN's
// process gone within seconds, and the session's cleanup leaves no
// container, no volume and no process of the builder on the host.
func TestDocker_ContainerBuildRunIsNotHostRootAndCancelLeavesNothing(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.buildsConfig(t))
	spec, _ := f.spec(t, runID("build-cancel"))
	spec.ContainerBuilds = true
	buildContext(t, spec.Workspace)
	const sleeper = "/bin/busybox\x00sleep\x00313"
	if err := os.WriteFile(filepath.Join(spec.Workspace, "Dockerfile.sleep"), []byte("FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"sleep\", \"313\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := f.prepare(t, e, spec)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, done := startStep(t, ctx, s, executor.Step{ID: "1", Name: "build", Script: "echo started\nbuildctl build --frontend dockerfile.v0 --local context=. --local dockerfile=. --opt filename=Dockerfile.sleep --output type=local,dest=out"})
	var uid int
	testwait.Until(t, time.Minute, "the build's RUN to run on the host", func() (bool, string) {
		var pid int
		pid, uid = hostProc(t, sleeper)
		return pid != 0, "no process " + strings.ReplaceAll(sleeper, "\x00", " ")
	})
	if uid < 1<<30 {
		t.Errorf("the build's RUN (its root) runs as host uid %d; want one of the builders' unprivileged ranges (from %d)", uid, 1<<30)
	}
	cancel()
	end := testwait.Receive(t, done, time.Minute, "the cancelled build step")
	if end.res.Reason != "cancelled" {
		t.Errorf("the cancelled build step: %+v %v", end.res, end.err)
	}
	testwait.Until(t, 30*time.Second, "the cancelled RUN to go", func() (bool, string) {
		pid, _ := hostProc(t, sleeper)
		return pid == 0, "pid " + strconv.Itoa(pid)
	})
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
	defer ccancel()
	if err := s.Cleanup(cctx); err != nil {
		t.Fatal(err)
	}
	if left := f.runnerLeft(t, cctx); len(left) != 0 {
		t.Errorf("the session's cleanup left: %v", left)
	}
	var procs []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	if uid < 1<<30 {
		dirs = nil // failed above: the host's own processes are no builder's
	}
	for _, d := range dirs {
		st, err := os.ReadFile(d + "/status")
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(st)) {
			if fs := strings.Fields(line); len(fs) > 1 && fs[0] == "Uid:" && fs[1] == strconv.Itoa(uid) {
				procs = append(procs, d)
			}
		}
	}
	if len(procs) > 0 {
		t.Errorf("processes of the builder's host uid %d left: %v", uid, procs)
	}
}

// TestDocker_DoctorChecksTheBuilderWhenBuildsAreAllowed: with
// --builder-image, doctor's last check starts a builds run whose step's
// buildctl reaches BuildKit, and removes it all; without, there is no
// such check (TestDocker_DoctorChecksEngineRuntimeFloorAndATestContainer).
func TestDocker_DoctorChecksTheBuilderWhenBuildsAreAllowed(t *testing.T) {
	f := newFixture(t)
	cfg := f.buildsConfig(t)
	cfg.Ephemeral = true // as knotless-run doctor makes it
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var last executor.Check
	f.executor(t, cfg).Doctor(ctx, true, func(c executor.Check) {
		t.Logf("%v %s: %s", c.OK, c.Name, c.Detail)
		if !c.OK {
			t.Errorf("check %s failed: %s (fix: %s)", c.Name, c.Detail, c.Fix)
		}
		last = c
	})
	if last.Name != "builder runs BuildKit" || !strings.Contains(last.Detail, "reached BuildKit") {
		t.Errorf("the last check: %+v", last)
	}
	if left := f.runnerLeft(t, ctx); len(left) != 0 {
		t.Errorf("doctor left: %v", left)
	}
}
