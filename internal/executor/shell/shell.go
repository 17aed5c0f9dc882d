package shell

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"

	"knotless.dev/knotless/internal/executor"
)

// Name is the shell executor's name as the --executor flag spells it.
const Name = "shell"

// fallbackPATH is the steps' PATH when neither Config.PATH nor the runner's
// own PATH says anything.
const fallbackPATH = "/usr/local/bin:/usr/bin:/bin"

// Config configures the shell executor.
type Config struct {
	// Dir is where sessions keep their private files (step scripts): one
	// directory Dir/<Spec.ID>, mode 0700, per run. Typically
	// <runner work dir>/shell. Created (0700) when missing. Required.
	Dir string
	// PATH is the PATH a step gets when Step.Env has no PATH. Empty means the
	// runner's own PATH as it was when New was called.
	PATH string
	// Logger receives one line per event an operator cares about (a step's
	// processes that would not die, output cut short). Nil means
	// slog.Default().
	Logger *slog.Logger
}

// Executor runs steps as processes on the runner's host. Its methods may be
// called concurrently for different runs.
type Executor struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	live map[string]*session // by Spec.ID, until Cleanup
}

var _ executor.Executor = (*Executor)(nil)

// New returns a shell executor configured by cfg. It does not touch the file
// system; Prepare creates cfg.Dir when needed.
func New(cfg Config) *Executor {
	if cfg.PATH == "" {
		cfg.PATH = os.Getenv("PATH")
	}
	if cfg.PATH == "" {
		cfg.PATH = fallbackPATH
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Executor{cfg: cfg, log: log.With("executor", Name), live: map[string]*session{}}
}

// Name returns "shell".
func (e *Executor) Name() string { return Name }

// validID is what a Spec.ID must look like: it names a directory under
// Config.Dir, so it is one plain path element.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Prepare checks that spec.Workspace is a directory, creates the session's
// private directory Config.Dir/<spec.ID> (mode 0700; a stale one left by an
// earlier process is replaced) with the steps' HOME in it, and writes
// to spec.Log that steps run directly on this host, and which parts of spec
// it ignores (Image, resource limits). Errors: an invalid ID, an ID that has
// a live session in this executor, a missing workspace, or a file-system
// failure; on error nothing is left behind.
func (e *Executor) Prepare(ctx context.Context, spec executor.Spec) (executor.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("prepare shell session %q: %w", spec.ID, err)
	}
	if !validID.MatchString(spec.ID) {
		return nil, fmt.Errorf("prepare shell session %q: the run ID must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", spec.ID)
	}
	if e.cfg.Dir == "" {
		return nil, fmt.Errorf("prepare shell session %s: the shell executor has no directory for its files (Config.Dir is empty)", spec.ID)
	}
	workdir, err := checkDir(spec.Workspace)
	if err != nil {
		return nil, fmt.Errorf("prepare shell session %s: workspace: %w", spec.ID, err)
	}
	base, err := filepath.Abs(e.cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("prepare shell session %s: %w", spec.ID, err)
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.live[spec.ID]; ok {
		return nil, fmt.Errorf("prepare shell session %s: a session with this ID is still live (call Cleanup first)", spec.ID)
	}
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, fmt.Errorf("prepare shell session %s: create executor directory: %w", spec.ID, err)
	}
	dir := filepath.Join(base, spec.ID)
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("prepare shell session %s: remove stale session directory: %w", spec.ID, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("prepare shell session %s: create session directory: %w", spec.ID, err)
	}
	// Mkdir's mode is filtered by the umask; 0700 is what we promise.
	if err := os.Chmod(dir, 0o700); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("prepare shell session %s: %w", spec.ID, err)
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("prepare shell session %s: create HOME: %w", spec.ID, err)
	}
	if err := writeSetupLog(spec); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("prepare shell session %s: write setup log: %w", spec.ID, err)
	}
	s := &session{
		exe:     e,
		id:      spec.ID,
		dir:     dir,
		workdir: workdir,
		home:    home,
		closing: make(chan struct{}),
	}
	e.live[spec.ID] = s
	return s, nil
}

// writeSetupLog tells the run's setup log what this executor is and what of
// spec it ignores.
func writeSetupLog(spec executor.Spec) error {
	w := spec.Log
	if w == nil {
		return nil
	}
	user := "the runner's user"
	if u := os.Getenv("USER"); u != "" {
		user = u
	}
	if _, err := fmt.Fprintf(w, "shell executor: steps run directly on this host as %s (uid %d), without isolation; use it for trusted repositories only\n", user, os.Getuid()); err != nil {
		return err
	}
	if spec.Image != "" {
		if _, err := fmt.Fprintf(w, "shell executor ignores image %s\n", spec.Image); err != nil {
			return err
		}
	}
	if spec.CPUs != "" || spec.MemoryBytes != 0 || spec.DiskBytes != 0 {
		if _, err := fmt.Fprintf(w, "shell executor ignores resource limits (cpus %q, memory %d bytes, disk %d bytes)\n",
			spec.CPUs, spec.MemoryBytes, spec.DiskBytes); err != nil {
			return err
		}
	}
	return nil
}

// checkDir returns path made absolute (symlinks resolved) if it names a
// directory.
func checkDir(path string) (string, error) {
	if path == "" {
		return "", errors.New("no directory given")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", abs)
	}
	return abs, nil
}

// Recover always fails with executor.ErrNotRecoverable: a shell session's
// processes do not outlive the runner process that started them.
func (e *Executor) Recover(ctx context.Context, h executor.Handle) (executor.Session, error) {
	return nil, fmt.Errorf("recover shell session %s: %w", h.ID, executor.ErrNotRecoverable)
}

// Sweep removes every session directory under Config.Dir whose name is not
// in keep and that no live session of this executor owns, after killing
// (SIGKILL) the process group its step had recorded, when an earlier
// runner process died mid-step and left processes running. A missing
// Config.Dir is not an error. Errors of single removals are joined.
func (e *Executor) Sweep(ctx context.Context, keep []string) error {
	if e.cfg.Dir == "" {
		return nil
	}
	entries, err := os.ReadDir(e.cfg.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep shell sessions: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for _, ent := range entries {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, fmt.Errorf("sweep shell sessions: %w", err))...)
		}
		name := ent.Name()
		if slices.Contains(keep, name) || e.live[name] != nil {
			continue
		}
		if !ent.IsDir() {
			// not a session
		} else if killed, err := killRecordedGroup(filepath.Join(e.cfg.Dir, name)); err != nil {
			errs = append(errs, fmt.Errorf("sweep shell session %s: %w", name, err))
		} else if killed {
			e.log.Info("killed processes an earlier runner process left running", "session", name)
		}
		if err := os.RemoveAll(filepath.Join(e.cfg.Dir, name)); err != nil {
			errs = append(errs, fmt.Errorf("sweep shell session %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// forget drops s from the live sessions.
func (e *Executor) forget(s *session) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.live[s.id] == s {
		delete(e.live, s.id)
	}
}
