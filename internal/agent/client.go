package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// Dialer opens a new byte stream to the agent (a Unix socket, an exec's
// STDIN/STDOUT). An error wrapping ErrGone means the agent is gone for
// good and the Client stops retrying.
type Dialer func(ctx context.Context) (io.ReadWriteCloser, error)

// ErrGone is wrapped by errors that mean the agent cannot be reached any
// more: its environment is gone.
var ErrGone = errors.New("agent is gone")

// Options configure a Client. Zero values take the defaults.
type Options struct {
	// Name is sent in the hello, e.g. "knotless-run v1.2.3".
	Name string
	// Heartbeat and DeadAfter: see DefaultHeartbeat, DefaultDeadAfter.
	Heartbeat time.Duration
	DeadAfter time.Duration
	// Retry bounds how long an operation keeps redialing a dropped
	// connection before it gives up (default 2 minutes).
	Retry time.Duration
	// Logger gets one line per lost and regained connection.
	Logger *slog.Logger
	// OnHello, when set, checks each new connection's hello (e.g. that the
	// agent serves the expected run); an error ends the dial as gone.
	OnHello func(AgentHello) error
}

// Client talks to one agent over connections it (re)dials on demand. Every
// operation survives dropped connections: it redials and resumes where it
// was, for up to Options.Retry. Operations must not run concurrently; Close
// may be called at any time. Connect returns the newest connection's
// hello (its Run as an Adopt since then set it).
type Client struct {
	dial Dialer
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	cur    *Conn
	hello  AgentHello
	closed bool
}

// NewClient returns a client that dials with dial. It does not dial yet.
func NewClient(dial Dialer, opts Options) *Client {
	if opts.Retry <= 0 {
		opts.Retry = 2 * time.Minute
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Client{dial: dial, opts: opts, log: log}
}

// ErrClientClosed is returned by operations after Close.
var ErrClientClosed = errors.New("agent client closed")

// Close drops the connection; operations in progress end with
// ErrClientClosed. The agent and its steps go on.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.cur != nil {
		_ = c.cur.Close()
		c.cur = nil
	}
	return nil
}

// Connect dials (unless connected) and returns the agent's hello.
func (c *Client) Connect(ctx context.Context) (AgentHello, error) {
	if _, err := c.conn(ctx); err != nil {
		return AgentHello{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hello, nil
}

// conn returns the live connection or dials a new one, retrying transient
// failures for Options.Retry.
func (c *Client) conn(ctx context.Context) (*Conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClientClosed
	}
	if cur := c.cur; cur != nil {
		select {
		case <-cur.Done():
			c.cur = nil
		default:
			c.mu.Unlock()
			return cur, nil
		}
	}
	c.mu.Unlock()

	deadline := time.Now().Add(c.opts.Retry)
	wait := 10 * time.Millisecond
	var lastErr error
	for attempt := 0; ; attempt++ {
		cn, hello, err := c.dialOnce(ctx)
		if err == nil {
			c.mu.Lock()
			if c.closed {
				c.mu.Unlock()
				_ = cn.Close()
				return nil, ErrClientClosed
			}
			c.cur, c.hello = cn, hello
			c.mu.Unlock()
			if attempt > 0 {
				c.log.Info("connection to the step agent is back", "run", hello.Run, "attempts", attempt+1)
			}
			return cn, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, ErrGone) || errors.Is(err, ErrNotAgent) || errors.Is(err, ErrClientClosed) {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: no connection for %s: %v", ErrGone, c.opts.Retry, lastErr)
		}
		if attempt == 0 {
			c.log.Warn("cannot reach the step agent; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

func (c *Client) dialOnce(ctx context.Context) (*Conn, AgentHello, error) {
	rwc, err := c.dial(ctx)
	if err != nil {
		return nil, AgentHello{}, err
	}
	hctx, cancel := context.WithTimeout(ctx, max(c.opts.DeadAfter, DefaultDeadAfter))
	defer cancel()
	cn, hello, err := ClientHandshake(hctx, rwc, ClientHello{Versions: []int{Version}, Client: c.opts.Name}, c.opts.Heartbeat, c.opts.DeadAfter)
	if err != nil {
		return nil, hello, err
	}
	if c.opts.OnHello != nil {
		if err := c.opts.OnHello(hello); err != nil {
			_ = cn.Close()
			return nil, hello, fmt.Errorf("%w: %v", ErrGone, err)
		}
	}
	return cn, hello, nil
}

// drop forgets cn after an error on it.
func (c *Client) drop(cn *Conn, err error) {
	_ = cn.Close()
	c.mu.Lock()
	if c.cur == cn {
		c.cur = nil
	}
	closed := c.closed
	c.mu.Unlock()
	if !closed { // Close lets go on purpose
		c.log.Info("connection to the step agent lost; resuming on a new one", "err", err)
	}
}

// StartDetached starts st as a detached step (st.Detach is set for the
// caller) and returns once the agent says it runs (or ran: starting an ID
// the agent knows only confirms it). It does not follow the output:
// RunStep with the same ID does, from any offset, until the step exits.
// A dropped connection is redialed and the Start sent again (idempotent
// by ID). Errors the agent answers are *Error.
func (c *Client) StartDetached(ctx context.Context, st Start) error {
	st.Detach = true
	for attempt := 0; ; attempt++ {
		cn, err := c.conn(ctx)
		if err != nil {
			return err
		}
		if err = cn.WriteJSON(TypeStart, st); err == nil {
			for {
				var f Frame
				if f, err = cn.next(ctx); err != nil {
					break
				}
				switch f.Type {
				case TypeStarted:
					return nil
				case TypeError:
					var e Error
					if err = Decode(f.Type, f.Payload, &e); err == nil {
						return &e
					}
				}
				if err != nil {
					break
				}
			}
		}
		if ctx.Err() != nil || attempt >= 4 {
			return fmt.Errorf("start detached step %s: %w", st.ID, err)
		}
		c.drop(cn, err)
	}
}

// StopStep asks the agent to stop a step (see Stop); it returns once the
// request is sent, not when the step has ended.
func (c *Client) StopStep(ctx context.Context, s Stop) error {
	for attempt := 0; ; attempt++ {
		cn, err := c.conn(ctx)
		if err != nil {
			return err
		}
		if err = cn.WriteJSON(TypeStop, s); err == nil {
			return nil
		}
		if ctx.Err() != nil || attempt >= 4 {
			return fmt.Errorf("stop step %s: %w", s.ID, err)
		}
		c.drop(cn, err)
	}
}

// Steps asks the agent for the state of every step it started.
func (c *Client) Steps(ctx context.Context) ([]StepInfo, error) {
	for attempt := 0; ; attempt++ {
		cn, err := c.conn(ctx)
		if err != nil {
			return nil, err
		}
		if err = cn.Write(TypeSteps); err == nil {
			for {
				var f Frame
				if f, err = cn.next(ctx); err != nil {
					break
				}
				if f.Type == TypeStepList {
					var l StepList
					if err = Decode(f.Type, f.Payload, &l); err == nil {
						return l.Steps, nil
					}
					break
				}
			}
		}
		if ctx.Err() != nil || attempt >= 4 {
			return nil, fmt.Errorf("ask the agent for its steps: %w", err)
		}
		c.drop(cn, err)
	}
}

// Adopt gives a warm agent its run (Adopt): run becomes the run it
// serves, deadline (zero: none) the run's end. Errors: the agent refused
// (a step started already: *Error), or the connection kept breaking.
func (c *Client) Adopt(ctx context.Context, run string, deadline time.Time) error {
	req := Adopt{Run: run}
	if !deadline.IsZero() {
		req.DeadlineMS = deadline.UnixMilli()
	}
	for attempt := 0; ; attempt++ {
		cn, err := c.conn(ctx)
		if err != nil {
			return err
		}
		if err = cn.WriteJSON(TypeAdopt, req); err == nil {
			for {
				var f Frame
				if f, err = cn.next(ctx); err != nil {
					break
				}
				if f.Type == TypeAdopted {
					c.mu.Lock()
					c.hello.Run = run
					c.mu.Unlock()
					return nil
				}
				if f.Type == TypeError {
					var e Error
					if err = Decode(f.Type, f.Payload, &e); err == nil {
						return &e
					}
					break
				}
			}
		}
		if ctx.Err() != nil || attempt >= 4 {
			return fmt.Errorf("give the warm agent run %s: %w", run, err)
		}
		c.drop(cn, err)
	}
}

// Shutdown asks the agent to kill every step at once and exit; it returns
// once the agent confirmed that no step process is left.
func (c *Client) Shutdown(ctx context.Context) error {
	for attempt := 0; attempt < 3; attempt++ {
		cn, err := c.conn(ctx)
		if err != nil {
			return err
		}
		if err = cn.WriteJSON(TypeShutdown, Shutdown{}); err == nil {
			for {
				var f Frame
				if f, err = cn.next(ctx); err != nil {
					break
				}
				if f.Type == TypeShutdownDone {
					_ = c.Close()
					return nil
				}
				if f.Type == TypeError {
					var e Error
					if err = Decode(f.Type, f.Payload, &e); err == nil {
						return &e
					}
					break
				}
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.drop(cn, err)
	}
	return errors.New("shut the agent down: the connection kept breaking")
}
