package kube

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"knotless.dev/knotless/internal/executor"
)

// checkBuilder is doctor's check of image builds (when --builds-namespace
// allows them): it prepares a run with container-builds: true, as a
// workflow's would, whose job container starts only once the builder's
// BuildKit answers, then runs `buildctl debug workers` in a step. So it
// passes only where the builds namespace admits the pod, the node gives
// it a user namespace, the builder image runs, and the node has the
// builder's Localhost seccomp profile, which deploy/kubernetes/builds'
// DaemonSet writes on every node (the check's usual failure on a new
// cluster); then it removes the pod.
func (e *Executor) checkBuilder(ctx context.Context, ok func(string, string), fail func(string, string, string)) {
	if e.builds == nil {
		return
	}
	const name = "builder runs BuildKit"
	ws, err := os.MkdirTemp("", "knotless-doctor-")
	if err != nil {
		fail(name, err.Error(), "check the temporary directory")
		return
	}
	defer os.RemoveAll(ws)
	profile := e.builds.cfg.BuilderSeccompProfile
	t0 := time.Now()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	sess, err := e.Prepare(pctx, executor.Spec{ID: "doctor-build-" + randomHex(4), Workspace: ws, Timeout: 5 * time.Minute, ContainerBuilds: true, Log: io.Discard})
	if err != nil {
		fail(name, firstLine(err.Error()), fmt.Sprintf("the builder needs its seccomp profile Localhost %s on every node that runs builds: apply deploy/kubernetes/builds (its DaemonSet in namespace knotless-seccomp writes it), or give --builder-seccomp-profile where yours is; for other causes, kubectl -n %s describe pod", profile, e.builds.ns))
		return
	}
	pod := PodOf(sess)
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := sess.Cleanup(cctx); err != nil {
			fail("builder pod removed", err.Error(), "kubectl -n "+e.builds.ns+" delete pod "+pod)
		}
	}()
	var out bytes.Buffer
	res, err := sess.Exec(pctx, executor.Step{ID: "1", Name: "doctor builder", Script: "buildctl debug workers >/dev/null"}, &out)
	if err != nil || res.ExitCode != 0 {
		fail(name, fmt.Sprintf("buildctl debug workers in a step: exit %d %v %s", res.ExitCode, err, strings.TrimSpace(out.String())), "see the builder's log: kubectl -n "+e.builds.ns+" logs "+pod+" -c "+BuilderContainer)
		return
	}
	ok(name, fmt.Sprintf("%s in namespace %s, seccomp profile Localhost %s, answering a step in %s", pod, e.builds.ns, profile, time.Since(t0).Round(10*time.Millisecond)))
}
