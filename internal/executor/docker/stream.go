package docker

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// stream is one exec of `knotless-agent connect` in a job container as a
// byte stream to the agent: writes go to the exec's STDIN, reads come
// from its STDOUT (demultiplexed: without a TTY the engine frames STDOUT
// and STDERR on one connection). STDERR (the bridge's own complaints) is
// kept for errors. Close ends the exec's connection; the agent and its
// steps go on.
type stream struct {
	hj   types.HijackedResponse
	outR *io.PipeReader
	done chan struct{}

	stderr agentenv.StderrTail
	once   sync.Once
}

// openStream creates and attaches an exec of argv in container id as
// user, with STDIN, STDOUT and STDERR and no TTY. Its config holds argv
// and the user only: whatever is secret travels on STDIN afterwards.
func (e *Executor) openStream(ctx context.Context, id, user string, argv []string) (*stream, error) {
	ex, err := e.api.ContainerExecCreate(ctx, id, container.ExecOptions{
		User: user, Cmd: argv, AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return nil, fmt.Errorf("create an exec in container %s: %w", short(id), err)
	}
	hj, err := e.api.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("attach to an exec in container %s: %w", short(id), err)
	}
	s := &stream{hj: hj, done: make(chan struct{})}
	outR, outW := io.Pipe()
	s.outR = outR
	go func() {
		defer close(s.done)
		_, err := stdcopy.StdCopy(outW, &s.stderr, hj.Reader)
		if err == nil {
			err = s.stderr.Explain(io.EOF)
		}
		_ = outW.CloseWithError(err)
	}()
	return s, nil
}

func (s *stream) Read(p []byte) (int, error)  { return s.outR.Read(p) }
func (s *stream) Write(p []byte) (int, error) { return s.hj.Conn.Write(p) }

// Close ends the exec's connection and waits for its reader.
func (s *stream) Close() error {
	s.once.Do(func() {
		_ = s.hj.CloseWrite()
		s.hj.Close()
		_ = s.outR.Close()
	})
	<-s.done
	return nil
}

// short is a container ID as `docker ps` shows it.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
