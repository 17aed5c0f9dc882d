package agentenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/version"
)

// Driver is what one agent-based executor writes: how its environment is
// made, found again and listed. Everything else (the ID rule, holding an
// ID while it is prepared, connecting, the session, sweeping) is Base's.
// Its methods may be called concurrently, for different IDs.
type Driver interface {
	// Make makes and starts the environment for spec with the step agent
	// running as serve says (Base has filled Run, Deadline, Heartbeat,
	// DeadAfter and, when ephemeral, ExitWithoutClient; the driver adds
	// the paths), and returns it; the agent need not listen yet (Base
	// connects through Env.Dial, retrying). spec.ID is valid. An error
	// that is (or wraps) an *executor.Fault ends the run errored with its
	// reason; on any error nothing of the environment is left.
	Make(ctx context.Context, spec executor.Spec, serve agent.Serve) (*Env, error)
	// Open finds the environment id's handle data describes, for Recover.
	// An environment that is gone, ended or not this driver's is an error
	// wrapping executor.ErrNotRecoverable (and an *executor.Fault, when the
	// driver knows why it ended); other errors are transient.
	Open(ctx context.Context, id string, data json.RawMessage) (*Env, error)
	// List returns this runner's environments, running or not, for Sweep.
	List(ctx context.Context) ([]Listed, error)
}

// Listed is one environment Driver.List found.
type Listed struct {
	// ID is its Spec.ID as the environment records it (NewBase's key
	// applies to the IDs it is compared with).
	ID string
	// Name says what it is in logs ("pod knotless-run-1-x2x9p").
	Name string
	// Remove removes it with everything it runs, as Env.Remove with the
	// agent not asked first. Idempotent.
	Remove func(ctx context.Context) error
	// After: Sweep removes it only once every listed entry without After
	// is removed (or failed): a thing the others use while they exist,
	// e.g. a Docker volume a listed container still mounts.
	After bool
}

// Environment is what every driver writes of an environment: how its
// agent is reached, why it stopped, how it goes. Its methods may be
// called concurrently, from any goroutine, before and after Remove.
type Environment interface {
	// Dial opens a new connection to the environment's agent (an
	// agent.Dialer): a byte stream the agent protocol runs over, which the
	// caller closes. An environment that can tell it is gone or ended
	// makes it return an error wrapping agent.ErrGone (Base then stops
	// dialing); other errors may pass (Base dials again). ctx bounds the
	// dial only, not the connection.
	Dial(ctx context.Context) (io.ReadWriteCloser, error)
	// Why says why the environment can no longer run steps: nil while it
	// runs (or when it cannot tell, e.g. its API cannot be asked); a
	// *executor.Fault with the run's reason (api.Reason*: evicted,
	// oom-killed, service, ...) and the environment's own words once it
	// stopped (evicted, oom-killed, the container ended). Base asks it when
	// the agent cannot be reached and when the agent stopped a step that
	// nobody cancelled (a signal to its PID 1 from outside); it may take
	// the environment a moment to know, so Base asks again for a few
	// seconds. It must return within ctx.
	Why(ctx context.Context) *executor.Fault
	// Remove removes the environment with everything in it (containers,
	// volumes, files, processes). agentEnded says the agent was asked to
	// end its steps and exit and answered, so nothing runs any more (it
	// may go at once, without a grace period). Idempotent: an environment
	// gone already is no error. Its error says what could not be removed.
	Remove(ctx context.Context, agentEnded bool) error
}

// Hooks are the optional moments of an environment's life at which its
// driver acts, composed as net/http/httptrace composes a ClientTrace: a
// nil hook is skipped, and Env.AddHooks adds hooks to those an Env has
// (each runs after the ones already there) instead of a driver wrapping
// the previous hook by hand.
type Hooks struct {
	// Attached runs once the agent answered (Prepare and Recover), with
	// the connected client and the agent's hello: it writes what the
	// setup log should say of the environment, or checks what the
	// environment holds. Its error fails the Prepare (the environment is
	// removed) or the Recover (wrap executor.ErrNotRecoverable for an
	// environment that cannot be used); composed, the first error ends
	// the chain.
	Attached func(ctx context.Context, c *agent.Client, hello agent.AgentHello) error
	// Ready runs once before the session's first Exec, CopyIn or CopyOut
	// (the kube executor copies the checkout in there): its error fails
	// that call and every later one; composed, the first error ends the
	// chain.
	Ready func(ctx context.Context, s *Session) error
	// AroundStep is called as each Exec begins; the function it returns
	// (nil: nothing to add) gets the step's Result to add to (a Note about
	// a limit the step reached). Composed, every one is called, and each
	// function returned, in the same order.
	AroundStep func() func(*executor.Result)
}

// compose returns hooks that run h's and then next's, each skipped when
// nil.
func (h Hooks) compose(next Hooks) Hooks {
	out := h
	if a, b := h.Attached, next.Attached; a != nil && b != nil {
		out.Attached = func(ctx context.Context, c *agent.Client, hello agent.AgentHello) error {
			if err := a(ctx, c, hello); err != nil {
				return err
			}
			return b(ctx, c, hello)
		}
	} else if b != nil {
		out.Attached = b
	}
	if a, b := h.Ready, next.Ready; a != nil && b != nil {
		out.Ready = func(ctx context.Context, s *Session) error {
			if err := a(ctx, s); err != nil {
				return err
			}
			return b(ctx, s)
		}
	} else if b != nil {
		out.Ready = b
	}
	if a, b := h.AroundStep, next.AroundStep; a != nil && b != nil {
		out.AroundStep = func() func(*executor.Result) {
			fa, fb := a(), b()
			switch {
			case fa == nil:
				return fb
			case fb == nil:
				return fa
			}
			return func(r *executor.Result) { fa(r); fb(r) }
		}
	} else if b != nil {
		out.AroundStep = b
	}
	return out
}

// Env is one environment as its driver made or found it: its Environment
// (required), its hooks and what Base needs to know of it besides.
type Env struct {
	Environment
	// Hooks are the driver's optional hooks (AddHooks adds more).
	Hooks Hooks
	// Name says what it is, for errors and logs ("pod ci/knotless-run-1-x2x9p").
	Name string
	// Data is the driver's part of the environment's Handle (marshalled
	// to JSON); never a secret.
	Data any
	// LostReason is the run's reason for a step the environment stopped
	// when Why never says why (default api.ReasonExecutor).
	LostReason string
	// Client, when set, is a client of the agent connected already (the
	// kube executor's warm pods keep one): Base uses it instead of
	// dialing. Its hello must name the run or AdoptFrom.
	Client *agent.Client
	// AdoptFrom, when set, is the run a warm agent serves until the
	// Attached hook adopts it for this one (agent.Client.Adopt): its
	// hello may name it.
	AdoptFrom string
	// HostPath, when set, maps a path as the steps see it (absolute) to
	// the same file on the runner's host and the host directory it must
	// stay in (the checkout, HOME), and reports false for paths the host
	// does not see. Caches then move by the host's file system instead of
	// through the agent, never through a symbolic link below root.
	HostPath func(p string) (host, root string, ok bool)
	// HostChown, when set, is called on what a host restore made (a file
	// or a tree), to give it to the environment's user.
	HostChown func(host string) error
	// Compress says the way to the agent is slower than compressing
	// (the kube executor's exec stream, through API server, kubelet and
	// container runtime): CopyIn and CopyOut then send zstd (its fastest
	// level) when the agent speaks it, as caches always do, and the
	// agent compresses a step's output frames where that shrinks them.
	Compress bool
	// Services, when set, reaches the environment's service containers
	// (Spec.Services); nil for a driver that runs none, which then refuses
	// a spec with services.
	Services Services
	// AgentPath is the step agent's program as the job's container sees
	// it (for `knotless-agent probe --connected`); required with Services.
	AgentPath string
}

// AddHooks adds h's hooks to env's: each runs after the one env has
// already (see Hooks). Not safe once Base has the Env.
func (env *Env) AddHooks(h Hooks) { env.Hooks = env.Hooks.compose(h) }

// Base is the executor.Executor of an agent-based executor, over its
// Driver: an executor embeds it, and its Name, Prepare, Recover and Sweep
// are Base's. Safe for concurrent use.
type Base struct {
	name   string
	driver Driver
	cfg    Config
	key    func(id string) string
	live   Live
}

// NewBase returns the Base of executor name over d. cfg is the executor's
// shared configuration (Defaults applied). key, when not nil, maps a
// Spec.ID to how the environments record it (a Kubernetes label value),
// for Sweep.
func NewBase(name string, d Driver, cfg Config, key func(id string) string) *Base {
	if key == nil {
		key = func(id string) string { return id }
	}
	return &Base{name: name, driver: d, cfg: cfg, key: key}
}

// Name is the executor's name as --executor spells it.
func (b *Base) Name() string { return b.name }

// log is the executor's logger.
func (b *Base) log() *slog.Logger {
	if b.cfg.Logger != nil {
		return b.cfg.Logger
	}
	return slog.Default()
}

// Prepare makes a fresh environment for spec through Driver.Make,
// connects to its agent and returns the session; see
// executor.Executor.Prepare. Errors: ctx already ended, an invalid ID, a
// spec.Workspace given that is not a directory, an ID with a live session
// in this process, the driver's error, an agent
// that cannot be reached (the environment's own reason when Why gives
// one). On error the environment is removed.
func (b *Base) Prepare(ctx context.Context, spec executor.Spec) (executor.Session, error) {
	fail := func(err error) (executor.Session, error) {
		return nil, fmt.Errorf("prepare %s session %q: %w", b.name, spec.ID, err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if err := executor.CheckID(spec.ID); err != nil {
		return fail(err)
	}
	if spec.Workspace != "" {
		if fi, err := os.Stat(spec.Workspace); err != nil || !fi.IsDir() {
			if err == nil {
				err = fmt.Errorf("%s is not a directory", spec.Workspace)
			}
			return fail(fmt.Errorf("workspace: %w", err))
		}
	}
	if !b.live.Reserve(spec.ID) {
		return fail(errors.New("a session with this ID is still live (call Cleanup first)"))
	}
	s, err := b.prepare(ctx, spec)
	b.live.Done(spec.ID, s)
	if err != nil {
		return fail(err)
	}
	return s, nil
}

func (b *Base) prepare(ctx context.Context, spec executor.Spec) (*Session, error) {
	serve := agent.Serve{Run: spec.ID, Heartbeat: b.cfg.Heartbeat, DeadAfter: b.cfg.DeadAfter}
	if spec.Timeout > 0 {
		serve.Deadline = time.Now().Add(spec.Timeout)
	}
	if b.cfg.Ephemeral {
		serve.ExitWithoutClient = b.cfg.OrphanAfter
	}
	env, err := b.driver.Make(ctx, spec, serve)
	if err != nil {
		return nil, err
	}
	env = b.observed(env)
	if o := b.cfg.Observer; o != nil {
		o.EnvironmentMade(b.name)
	}
	s, err := b.attach(ctx, spec.ID, env, agentStartWait)
	if err == nil {
		if err = startServices(ctx, spec, env, b.name); err != nil {
			WriteServiceLogs(context.WithoutCancel(ctx), spec, env.Services)
			_ = s.Cleanup(context.WithoutCancel(ctx))
			return nil, err
		}
		s.checkServices = len(spec.Services) > 0
	}
	if err != nil {
		// The environment may say why its agent cannot be reached (the
		// pod's program cannot execute there); it may take the runtime a
		// moment to report it.
		f := whyWithin(env, 5*time.Second)
		_ = env.Remove(context.WithoutCancel(ctx), false)
		if f != nil {
			return nil, f
		}
		return nil, err
	}
	return s, nil
}

// whyWithin asks env.Why until it says why, for up to bound; nil when it
// never does.
func whyWithin(env *Env, bound time.Duration) *executor.Fault {
	deadline := time.Now().Add(bound)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		f := env.Why(ctx)
		cancel()
		if f != nil || time.Now().After(deadline) {
			return f
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// observed wraps env's Remove to tell the Observer, once, that the
// environment is gone.
func (b *Base) observed(env *Env) *Env {
	if b.cfg.Observer == nil || env.Environment == nil {
		return env
	}
	env.Environment = &observedEnvironment{Environment: env.Environment, o: b.cfg.Observer, name: b.name}
	return env
}

// observedEnvironment is an Environment whose first successful Remove
// tells o that an environment of executor name is gone.
type observedEnvironment struct {
	Environment
	o    executor.Observer
	name string
	once sync.Once
}

func (e *observedEnvironment) Remove(ctx context.Context, agentEnded bool) error {
	err := e.Environment.Remove(ctx, agentEnded)
	if err == nil {
		e.once.Do(func() { e.o.EnvironmentRemoved(e.name) })
	}
	return err
}

// agentStartWait bounds how long a new environment's agent may take to
// listen.
const agentStartWait = 10 * time.Second

// attach connects to env's agent, runs its Attached hook and makes the
// session. An agent that is not there yet (agent.ErrGone) is dialed again
// for up to starting, while Env.Why has nothing to say.
func (b *Base) attach(ctx context.Context, id string, env *Env, starting time.Duration) (*Session, error) {
	client := env.Client
	if client == nil {
		client = b.client(id, env)
	}
	deadline := time.Now().Add(starting)
	hello, err := client.Connect(ctx)
	for err != nil && errors.Is(err, agent.ErrGone) && time.Now().Before(deadline) && ctx.Err() == nil && env.Why(ctx) == nil {
		time.Sleep(20 * time.Millisecond)
		hello, err = client.Connect(ctx)
	}
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("connect to the step agent in %s: %w", env.Name, err)
	}
	if hello.Run != id && (env.AdoptFrom == "" || hello.Run != env.AdoptFrom) {
		_ = client.Close()
		return nil, fmt.Errorf("the agent in %s serves run %q, not %q", env.Name, hello.Run, id)
	}
	if env.Hooks.Attached != nil {
		if err := env.Hooks.Attached(ctx, client, hello); err != nil {
			_ = client.Close()
			return nil, err
		}
	}
	data, err := json.Marshal(env.Data)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	var s *Session
	s = newSession(sessionConfig{
		Executor: b.name, ID: id, Workdir: hello.Workdir, Client: client, Env: env,
		Handle: executor.Handle{Executor: b.name, ID: id, Data: data},
		Forget: func() { b.live.Forget(id, s) },
	})
	return s, nil
}

// client is the agent client of environment id: each dial is Env.Dial;
// the agent must say it serves id.
func (b *Base) client(id string, env *Env) *agent.Client {
	var hellos atomic.Int64
	return agent.NewClient(env.Dial, agent.Options{
		Name:      "knotless-run " + version.Version,
		Heartbeat: b.cfg.Heartbeat,
		DeadAfter: b.cfg.DeadAfter,
		Logger:    b.log().With("run", id, "environment", env.Name),
		OnHello: func(h agent.AgentHello) error {
			if h.Run != id && (env.AdoptFrom == "" || h.Run != env.AdoptFrom) {
				return fmt.Errorf("the agent in %s serves run %q, not %q", env.Name, h.Run, id)
			}
			if hellos.Add(1) > 1 && b.cfg.Observer != nil {
				b.cfg.Observer.AgentReconnected(b.name)
			}
			return nil
		},
	})
}

// Recover re-attaches to the environment h describes through Driver.Open
// and a new connection to its agent; see executor.Executor.Recover.
// Errors wrap executor.ErrNotRecoverable when the handle is another
// executor's or invalid, the environment is gone or ended, or its agent
// is gone or is not an agent.
func (b *Base) Recover(ctx context.Context, h executor.Handle) (executor.Session, error) {
	notRecoverable := func(format string, args ...any) error {
		return fmt.Errorf("recover %s session %s: %s: %w", b.name, h.ID, fmt.Sprintf(format, args...), executor.ErrNotRecoverable)
	}
	if h.Executor != b.name {
		return nil, notRecoverable("the handle is of executor %q", h.Executor)
	}
	if err := executor.CheckID(h.ID); err != nil {
		return nil, notRecoverable("%v", err)
	}
	if !b.live.Reserve(h.ID) {
		return nil, fmt.Errorf("recover %s session %s: a session with this ID is live in this process", b.name, h.ID)
	}
	env, err := b.driver.Open(ctx, h.ID, h.Data)
	if err != nil {
		b.live.Done(h.ID, nil)
		return nil, fmt.Errorf("recover %s session %s: %w", b.name, h.ID, err)
	}
	env = b.observed(env) // a recovered environment is removed once too
	s, err := b.attach(ctx, h.ID, env, 0)
	b.live.Done(h.ID, s)
	if err != nil {
		if errors.Is(err, executor.ErrNotRecoverable) {
			return nil, fmt.Errorf("recover %s session %s: %w", b.name, h.ID, err)
		}
		if errors.Is(err, agent.ErrGone) || errors.Is(err, agent.ErrNotAgent) {
			return nil, notRecoverable("%v", err)
		}
		return nil, fmt.Errorf("recover %s session %s: %w", b.name, h.ID, err)
	}
	return s, nil
}

// SweepAtOnce is how many environments Sweep removes at once. A runner's
// start may find a thousand left by a runner killed under load; removed
// one after another they took 30 s (a pod's deletion is a request and a
// wait for it to go: docs/scaling.md). The driver's own limits (the kube
// client's --kube-api-qps) still bound the rate.
const SweepAtOnce = 16

// Sweep removes every environment Driver.List finds whose ID is not in
// keep and that no live session of this Base holds, up to SweepAtOnce at
// once; the entries marked Listed.After go once all the others have; see
// executor.Executor.Sweep. Each removal is logged and told to
// Config.Observer. Errors of single environments are joined, in List's
// order; once ctx ends no further removal starts, those under way see ctx,
// and ctx's error is joined too.
func (b *Base) Sweep(ctx context.Context, keep []string) error {
	list, err := b.driver.List(ctx)
	if err != nil {
		return fmt.Errorf("sweep %s environments: %w", b.name, err)
	}
	kept := map[string]bool{}
	for _, id := range append(slices.Clone(keep), b.live.IDs()...) {
		kept[b.key(id)] = true
	}
	errs := make([]error, len(list)+1)
	for _, after := range []bool{false, true} {
		if !b.removeListed(ctx, list, func(l Listed) bool { return !kept[l.ID] && l.After == after }, errs) {
			break
		}
	}
	return errors.Join(errs...)
}

// removeListed removes the entries of list that pick selects, up to
// SweepAtOnce at once, and waits for them; entry i's error goes to
// errs[i], ctx's to errs[len(list)]. It reports whether ctx was still live
// when every removal had started.
func (b *Base) removeListed(ctx context.Context, list []Listed, pick func(Listed) bool, errs []error) bool {
	slots := make(chan struct{}, SweepAtOnce)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, l := range list {
		if !pick(l) {
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if err := ctx.Err(); err != nil {
			errs[len(list)] = fmt.Errorf("sweep %s environments: %w", b.name, err)
			return false
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := l.Remove(ctx); err != nil {
				errs[i] = fmt.Errorf("sweep %s: %w", l.Name, err)
				return
			}
			if o := b.cfg.Observer; o != nil {
				o.EnvironmentRemoved(b.name)
			}
			b.log().Info("removed an environment no run of this runner holds", "executor", b.name, "environment", l.Name, "run", l.ID)
		}()
	}
	return true
}

// Held is how many environments live sessions of this Base hold or are
// being made for.
func (b *Base) Held() int { return len(b.live.IDs()) }

// Holds reports whether a live session of this Base holds (or is being
// made for) id.
func (b *Base) Holds(id string) bool { return b.live.Holds(id) }

// stoppedNote is the Note of a step the environment stopped when it does
// not say why.
const stoppedNote = "the step agent stopped the step though nobody cancelled it: its environment signalled it (stopped, deleted or evicted from outside the runner)"

// lostReason is env's LostReason, api.ReasonExecutor by default.
func (env *Env) lostReason() string {
	if env.LostReason != "" {
		return env.LostReason
	}
	return api.ReasonExecutor
}
