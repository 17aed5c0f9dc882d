package docker

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"knotless.dev/knotless/internal/executor"
)

// dataRootFree is the free space of the engine's data root (its
// DockerRootDir, statfs on this host: bytes available to unprivileged
// users).
func (e *Executor) dataRootFree(ctx context.Context) (uint64, string, error) {
	info, err := e.api.Info(ctx)
	if err != nil {
		return 0, "", fmt.Errorf("ask the engine for its data root: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(info.DockerRootDir, &st); err != nil {
		return 0, info.DockerRootDir, fmt.Errorf("free space of the engine's data root %s (it must be on the runner's host): %w", info.DockerRootDir, err)
	}
	return st.Bavail * uint64(st.Bsize), info.DockerRootDir, nil
}

// waitDisk holds the run back while the Docker data disk has less free
// space than Config.DiskFloor, saying so in the run's log (once, and
// again when the figure changes by more than a tenth), and looks again
// every DiskPoll until there is room or ctx ends.
func (e *Executor) waitDisk(ctx context.Context, spec executor.Spec) error {
	if e.cfg.DiskFloor <= 0 {
		return nil
	}
	var said uint64
	waited := time.Now()
	for {
		free, where, err := e.cfg.FreeSpace(ctx)
		if err != nil {
			return fmt.Errorf("--disk-floor: %w", err)
		}
		if free >= uint64(e.cfg.DiskFloor) {
			if said != 0 {
				e.logf(spec, "the Docker data disk %s has %s free again (--disk-floor %s): starting after %s", where, size(free), size(uint64(e.cfg.DiskFloor)), time.Since(waited).Round(time.Second))
			}
			return nil
		}
		if said == 0 || free < said-said/10 || free > said+said/10 {
			e.logf(spec, "waiting: the Docker data disk %s has %s free, less than --disk-floor %s; the run starts when there is room", where, size(free), size(uint64(e.cfg.DiskFloor)))
			e.log.Warn("a run waits for disk space", "run", spec.ID, "free", free, "floor", e.cfg.DiskFloor, "where", where)
			said = max(free, 1)
		}
		select {
		case <-time.After(e.cfg.DiskPoll):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func size(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

func tempDir() (string, error) { return os.MkdirTemp("", "knotless-doctor-") }

func removeAll(dir string) { _ = os.RemoveAll(dir) }
