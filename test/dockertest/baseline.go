package dockertest

import (
	"context"
	"fmt"
	"time"

	"github.com/docker/docker/api/types/container"
)

// BareRun is the bare SDK baseline of a one-step run: create a container
// of JobImage hardened as the docker executor makes it (1000:1000,
// read-only root, no capabilities, no-new-privileges, 1 CPU, 128 MiB with
// no swap, 256 pids) on network ("": none; the docker executor's job
// containers are on the runner's own bridge network, NetworkName) whose
// PID 1 exits on SIGTERM, labelled labels, start it, one exec of `true`
// (create, attach, exit code), and remove it by force. It returns the
// whole time and the exec's.
func (e *Engine) BareRun(ctx context.Context, labels map[string]string, network string) (total, exec time.Duration, err error) {
	if network == "" {
		network = "none"
	}
	c := e.Client
	t0 := time.Now()
	pids := int64(256)
	created, err := c.ContainerCreate(ctx, &container.Config{
		Image: JobImage, User: "1000:1000", Labels: labels,
		Entrypoint: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"},
	}, &container.HostConfig{
		ReadonlyRootfs: true, CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges=true"}, NetworkMode: container.NetworkMode(network),
		Resources: container.Resources{NanoCPUs: 1e9, Memory: 128 << 20, MemorySwap: 128 << 20, PidsLimit: &pids},
	}, nil, nil, "")
	if err != nil {
		return 0, 0, err
	}
	if err := c.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		_ = c.ContainerRemove(ctx, created.ID, container.RemoveOptions{Force: true})
		return 0, 0, err
	}
	t1 := time.Now()
	_, _, code, err := e.Exec(ctx, created.ID, "", []string{"true"}, nil)
	exec = time.Since(t1)
	if err == nil && code != 0 {
		err = fmt.Errorf("bare exec of true: exit %d", code)
	}
	if rerr := c.ContainerRemove(ctx, created.ID, container.RemoveOptions{Force: true}); err == nil {
		err = rerr
	}
	return time.Since(t0), exec, err
}
