package stepagent

import (
	"context"
	"errors"
	"io"
	"time"

	"knotless.dev/knotless/internal/agent"
)

// ServeConn speaks the protocol with one client until it leaves.
func (a *Agent) ServeConn(rwc io.ReadWriteCloser) {
	hctx, cancel := context.WithTimeout(context.Background(), max(a.cfg.DeadAfter, agent.DefaultDeadAfter))
	cn, ch, err := agent.AgentHandshake(hctx, rwc, a.hello, a.cfg.Heartbeat, a.cfg.DeadAfter)
	cancel()
	if err != nil {
		if !errors.Is(err, io.EOF) {
			a.log.Warn("client handshake failed", "err", err)
		}
		return
	}
	a.mu.Lock()
	a.clients++
	a.mu.Unlock()
	a.log.Debug("client connected", "client", ch.Client)
	defer func() {
		a.mu.Lock()
		a.clients--
		a.lastSeen = time.Now()
		a.mu.Unlock()
	}()
	h := &connHandler{a: a, cn: cn}
	h.run()
	_ = cn.Close()
}

// connHandler serves one connection's requests in order.
type connHandler struct {
	a  *Agent
	cn *agent.Conn

	stopFollow context.CancelFunc
	followDone chan struct{}

	copyIn *copyIn // an unpacking in progress
}

type copyIn struct {
	pw   *io.PipeWriter
	done chan agent.CopyDone
	h    interface {
		io.Writer
		Sum([]byte) []byte
	}
	n int64
}

// decode reads f's JSON payload; one that does not decode means the
// stream is not what the protocol says: the caller ends the connection.
func decode[T any](h *connHandler, f agent.Frame) (T, bool) {
	var v T
	if err := agent.Decode(f.Type, f.Payload, &v); err != nil {
		h.fail(f.Type, "", err)
		return v, false
	}
	return v, true
}

func (h *connHandler) fail(t agent.Type, stepID string, err error) {
	_ = h.cn.WriteJSON(agent.TypeError, agent.Error{For: t.String(), Step: stepID, Message: err.Error()})
}

func (h *connHandler) run() {
	defer h.endFollow()
	defer func() {
		if h.copyIn != nil {
			h.copyIn.pw.CloseWithError(errors.New("connection lost"))
			<-h.copyIn.done
		}
	}()
	for f := range h.cn.Frames() {
		t, p := f.Type, f.Payload
		switch t {
		case agent.TypeStart:
			req, ok := decode[agent.Start](h, f)
			if !ok {
				return
			}
			s, attached, err := h.a.start(&req)
			if err != nil {
				h.fail(t, req.ID, err)
				continue
			}
			if err := h.cn.WriteJSON(agent.TypeStarted, agent.Started{ID: s.id, Attached: attached}); err != nil {
				return
			}
			if req.Detach {
				continue // a service: followed later, by Attach or another Start
			}
			h.follow(s, req.Offset, req.Chunk, req.Compression)
		case agent.TypeAttach:
			req, ok := decode[agent.Attach](h, f)
			if !ok {
				return
			}
			s := h.a.step(req.ID)
			if s == nil {
				h.fail(t, req.ID, errors.New("no such step"))
				continue
			}
			h.follow(s, req.Offset, req.Chunk, req.Compression)
		case agent.TypeStop:
			req, ok := decode[agent.Stop](h, f)
			if !ok {
				return
			}
			h.a.stop(req)
		case agent.TypeSteps:
			if err := h.cn.WriteJSON(agent.TypeStepList, agent.StepList{Steps: h.a.hello(agent.ClientHello{}).Steps}); err != nil {
				return
			}
		case agent.TypeCopyIn:
			req, ok := decode[agent.CopyIn](h, f)
			if !ok {
				return
			}
			h.startCopyIn(req)
		case agent.TypeData:
			if h.copyIn != nil {
				h.copyIn.h.Write(p)
				h.copyIn.n += int64(len(p))
				_, _ = h.copyIn.pw.Write(p) // an unpacking error is reported at DataEnd
			}
			f.Release()
		case agent.TypeDataEnd:
			end, ok := decode[agent.DataEnd](h, f)
			if !ok {
				return
			}
			h.endCopyIn(end)
		case agent.TypeCopyOut:
			req, ok := decode[agent.CopyOut](h, f)
			if !ok {
				return
			}
			h.copyOut(req)
		case agent.TypeFetch:
			if !h.fetch(f) {
				return
			}
		case agent.TypeAdopt:
			req, ok := decode[agent.Adopt](h, f)
			if !ok {
				return
			}
			if err := h.a.adopt(req); err != nil {
				h.fail(f.Type, "", err)
				continue
			}
			_ = h.cn.Write(agent.TypeAdopted)
		case agent.TypeShutdown:
			h.a.log.Info("shutdown requested")
			h.a.stopAll()
			_ = h.cn.Write(agent.TypeShutdownDone)
			h.awaitClose(shutdownLinger)
			h.a.Shutdown()
			return
		}
	}
}

// shutdownLinger bounds how long an agent asked to shut down waits for its
// client to close the connection before it exits.
const shutdownLinger = 2 * time.Second

// awaitClose waits until the client closes the connection (it does on
// reading ShutdownDone), at most d, discarding what else arrives. An
// agent that exited at once could cut its answer off on the way: in a
// job pod, PID 1's exit kills the exec's `knotless-agent connect`, which
// may not have passed the answer on yet, and the client would then dial
// again into a pod being torn down (and wait, and log that it could not).
func (h *connHandler) awaitClose(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case _, ok := <-h.cn.Frames():
			if !ok {
				return
			}
		case <-h.cn.Done():
			return
		case <-t.C:
			return
		}
	}
}
