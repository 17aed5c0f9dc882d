package dockertest

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// Exec runs argv in container id as user (empty: the container's) with
// stdin (may be nil) and returns its STDOUT, STDERR and exit code: the
// test's own view of a container, not the executor's.
func (e *Engine) Exec(ctx context.Context, id, user string, argv []string, stdin []byte) (stdout, stderr []byte, code int, err error) {
	ex, err := e.Client.ContainerExecCreate(ctx, id, container.ExecOptions{
		User: user, Cmd: argv, AttachStdin: stdin != nil, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return nil, nil, -1, fmt.Errorf("exec create: %w", err)
	}
	hj, err := e.Client.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, nil, -1, fmt.Errorf("exec attach: %w", err)
	}
	defer hj.Close()
	if stdin != nil {
		go func() {
			_, _ = io.Copy(hj.Conn, bytes.NewReader(stdin))
			_ = hj.CloseWrite()
		}()
	}
	var o, se bytes.Buffer
	if _, err := stdcopy.StdCopy(&o, &se, hj.Reader); err != nil {
		return o.Bytes(), se.Bytes(), -1, err
	}
	got, err := e.Client.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		return o.Bytes(), se.Bytes(), -1, err
	}
	return o.Bytes(), se.Bytes(), got.ExitCode, nil
}
