// Package dummy is an executor.Executor for the runner's tests: it starts
// no process, and each step's script is a tiny language that says what the
// step does (print, exit, run out of memory, be evicted, vanish), so tests
// cover every fault an executor can report, fast and without a host to run
// on. Its environments live in a World, which outlives Executor values, so
// a test can "restart" the runner and Recover them.
//
// Script lines (one command each; unknown commands fail the step):
//
//	echo TEXT        print TEXT and a newline
//	print N TEXT     print N lines "TEXT 1" .. "TEXT N"
//	sleep DURATION   wait (a stop ends the wait)
//	wait NAME        wait until World.Open(NAME)
//	exit N           end with exit code N
//	oom              end killed for memory: exit 137, reason oom-killed
//	evicted          end evicted: exit 137, reason evicted
//	vanish           the environment is gone: Exec fails
//
// Images steer Prepare: "dummy/fail-prepare" makes it fail. Never used
// outside tests; knotless-run does not offer it.
package dummy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
)

// Name is the dummy executor's name.
const Name = "dummy"

// FailPrepare is the image that makes Prepare fail.
const FailPrepare = "dummy/fail-prepare"

// World holds every environment the dummy executors of one test made.
type World struct {
	mu     sync.Mutex
	envs   map[string]*env
	gates  map[string]chan struct{}
	starts map[string]int // "ENV/STEP" → times started
}

// NewWorld returns an empty world.
func NewWorld() *World {
	return &World{envs: map[string]*env{}, gates: map[string]chan struct{}{}, starts: map[string]int{}}
}

// Open releases every step waiting at gate name (and later ones).
func (w *World) Open(name string) {
	close(w.gate(name))
}

func (w *World) gate(name string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	g, ok := w.gates[name]
	if !ok {
		g = make(chan struct{})
		w.gates[name] = g
	}
	return g
}

// IDs lists the environments that exist, sorted.
func (w *World) IDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []string
	for id := range w.envs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Started reports how many times step stepID was started in environment id
// (a step taken over must be started once), also after the environment is
// gone.
func (w *World) Started(id, stepID string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.starts[id+"/"+stepID]
}

type env struct {
	id, workdir string
	mu          sync.Mutex
	steps       map[string]*step
	gone        bool
}

type step struct {
	mu     sync.Mutex
	out    []byte
	grown  chan struct{}
	done   chan struct{}
	res    executor.Result
	failed string // vanish: Exec fails with this
	stop   chan string
	start  time.Time
}

// Executor is a dummy executor over a World.
type Executor struct{ world *World }

var _ executor.Executor = (*Executor)(nil)

// New returns an executor whose environments live in world.
func New(world *World) *Executor { return &Executor{world: world} }

// Name returns "dummy".
func (e *Executor) Name() string { return Name }

// Prepare makes an environment, or fails for image FailPrepare (nothing is
// left then) and for a cancelled ctx.
func (e *Executor) Prepare(ctx context.Context, spec executor.Spec) (executor.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if spec.Image == FailPrepare {
		if spec.Log != nil {
			fmt.Fprintln(spec.Log, "dummy executor: preparing fails as image", FailPrepare, "asks")
		}
		return nil, errors.New("dummy executor: image " + FailPrepare)
	}
	en := &env{id: spec.ID, workdir: spec.Workspace, steps: map[string]*step{}}
	e.world.mu.Lock()
	e.world.envs[spec.ID] = en
	e.world.mu.Unlock()
	if spec.Log != nil {
		fmt.Fprintln(spec.Log, "dummy executor: no process runs")
	}
	return &session{ex: e, env: en, detached: make(chan struct{})}, nil
}

// Recover finds the environment in the world.
func (e *Executor) Recover(ctx context.Context, h executor.Handle) (executor.Session, error) {
	e.world.mu.Lock()
	en := e.world.envs[h.ID]
	e.world.mu.Unlock()
	if en == nil || h.Executor != Name {
		return nil, fmt.Errorf("recover %s: %w", h.ID, executor.ErrNotRecoverable)
	}
	en.mu.Lock()
	gone := en.gone
	en.mu.Unlock()
	if gone {
		return nil, fmt.Errorf("recover %s: the environment vanished: %w", h.ID, executor.ErrNotRecoverable)
	}
	return &session{ex: e, env: en, detached: make(chan struct{})}, nil
}

// Sweep removes every environment not in keep.
func (e *Executor) Sweep(ctx context.Context, keep []string) error {
	e.world.mu.Lock()
	defer e.world.mu.Unlock()
	for id, en := range e.world.envs {
		if !slices.Contains(keep, id) {
			en.kill()
			delete(e.world.envs, id)
		}
	}
	return nil
}

func (en *env) kill() {
	en.mu.Lock()
	defer en.mu.Unlock()
	for _, s := range en.steps {
		select {
		case s.stop <- api.ReasonCancelled:
		default:
		}
	}
}

type session struct {
	ex       *Executor
	env      *env
	mu       sync.Mutex
	closed   bool
	detached chan struct{}
	detOnce  sync.Once
}

func (s *session) ID() string      { return s.env.id }
func (s *session) Workdir() string { return s.env.workdir }

func (s *session) Handle() executor.Handle {
	data, _ := json.Marshal(map[string]string{"id": s.env.id})
	return executor.Handle{Executor: Name, ID: s.env.id, Data: data}
}

func (s *session) Detach() error {
	s.detOnce.Do(func() { close(s.detached) })
	return nil
}

func (s *session) Cleanup(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.env.kill()
	s.ex.world.mu.Lock()
	if s.ex.world.envs[s.env.id] == s.env {
		delete(s.ex.world.envs, s.env.id)
	}
	s.ex.world.mu.Unlock()
	return nil
}

func (s *session) CopyIn(ctx context.Context, src, dst string) error  { return nil }
func (s *session) CopyOut(ctx context.Context, src, dst string) error { return nil }

// Exec starts the step (once per ID) and follows its output from
// st.Offset.
func (s *session) Exec(ctx context.Context, st executor.Step, out io.Writer) (executor.Result, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return executor.Result{ExitCode: -1}, executor.ErrClosed
	}
	select {
	case <-s.detached:
		return executor.Result{ExitCode: -1}, executor.ErrDetached
	default:
	}
	en := s.env
	en.mu.Lock()
	sp := en.steps[st.ID]
	if sp == nil || st.ID == "" {
		sp = &step{grown: make(chan struct{}), done: make(chan struct{}), stop: make(chan string, 1), start: time.Now()}
		if st.ID != "" {
			en.steps[st.ID] = sp
		}
		s.ex.world.mu.Lock()
		s.ex.world.starts[en.id+"/"+st.ID]++
		s.ex.world.mu.Unlock()
		go s.ex.world.run(en, sp, st)
	}
	en.mu.Unlock()

	off := st.Offset
	stopped := false
	for {
		sp.mu.Lock()
		grown, data := sp.grown, sp.out[min(off, int64(len(sp.out))):]
		sp.mu.Unlock()
		if len(data) > 0 {
			if _, err := out.Write(data); err != nil {
				return executor.Result{ExitCode: -1}, err
			}
			off += int64(len(data))
			continue
		}
		select {
		case <-sp.done:
			sp.mu.Lock()
			rest := sp.out[min(off, int64(len(sp.out))):]
			sp.mu.Unlock()
			if len(rest) > 0 {
				continue
			}
			if sp.failed != "" {
				return executor.Result{ExitCode: -1}, errors.New(sp.failed)
			}
			return sp.res, nil
		case <-grown:
		case <-s.detached:
			return executor.Result{ExitCode: -1}, executor.ErrDetached
		case <-ctx.Done():
			if !stopped {
				stopped = true
				reason := api.ReasonCancelled
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					reason = api.ReasonTimeout
				}
				select {
				case sp.stop <- reason:
				default:
				}
			}
			ctx = context.WithoutCancel(ctx)
		}
	}
}

func (sp *step) printf(format string, args ...any) {
	sp.mu.Lock()
	sp.out = fmt.Appendf(sp.out, format, args...)
	close(sp.grown)
	sp.grown = make(chan struct{})
	sp.mu.Unlock()
}

// run interprets the script until it ends or is stopped.
func (w *World) run(en *env, sp *step, st executor.Step) {
	res := executor.Result{}
	defer func() {
		res.Duration = time.Since(sp.start)
		sp.mu.Lock()
		sp.res = res
		sp.mu.Unlock()
		close(sp.done)
	}()
	var timeout <-chan time.Time
	if st.Timeout > 0 {
		timeout = time.After(st.Timeout)
	}
	wait := func(c <-chan struct{}, d <-chan time.Time) bool {
		select {
		case <-c:
		case <-d:
		case reason := <-sp.stop:
			res = executor.Result{ExitCode: 143, Reason: reason}
			return false
		case <-timeout:
			res = executor.Result{ExitCode: 143, Reason: api.ReasonTimeout}
			return false
		}
		return true
	}
	sc := bufio.NewScanner(strings.NewReader(st.Script))
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		switch cmd {
		case "":
		case "echo":
			sp.printf("%s\n", arg)
		case "print":
			nStr, text, _ := strings.Cut(arg, " ")
			n, _ := strconv.Atoi(nStr)
			for i := 1; i <= n; i++ {
				sp.printf("%s %d\n", text, i)
			}
		case "sleep":
			d, err := time.ParseDuration(arg)
			if err != nil {
				sp.printf("dummy: %v\n", err)
				res.ExitCode = 2
				return
			}
			if !wait(nil, time.After(d)) {
				return
			}
		case "wait":
			if !wait(w.gate(arg), nil) {
				return
			}
		case "exit":
			res.ExitCode, _ = strconv.Atoi(arg)
			return
		case "oom":
			res = executor.Result{ExitCode: 137, Reason: api.ReasonOOMKilled}
			return
		case "evicted":
			res = executor.Result{ExitCode: 137, Reason: api.ReasonEvicted}
			return
		case "vanish":
			en.mu.Lock()
			en.gone = true
			en.mu.Unlock()
			sp.failed = "dummy executor: the environment vanished"
			return
		default:
			sp.printf("dummy: unknown command %q\n", cmd)
			res.ExitCode = 127
			return
		}
	}
}
