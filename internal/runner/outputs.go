package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"knotless.dev/knotless/internal/cleanup"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/logship"
	"knotless.dev/knotless/internal/outputs"
)

// OutputsSink is implemented by a Reporter that stores a run's outputs
// (SpoolReporter). StoreOutputs calls write once with the file the
// archive goes to; write returns how many entries it wrote. The archive is
// delivered before the run's result.
type OutputsSink interface {
	StoreOutputs(write func(w io.Writer) (entries int, err error)) (logship.OutputsRecord, error)
}

// OutputsTimeout bounds copying a run's outputs out of its environment and
// packing them, whatever is left of the run's own timeout.
const OutputsTimeout = 15 * time.Minute

// collectOutputs copies the workflow's `outputs:` paths out of sess into
// Job.OutputsDir, packs them (package outputs) and hands the archive to
// the reporter, which delivers it before the result. It runs after the
// steps whatever their result (also after a failure, a timeout or a
// person's cancel), unless no step ever started or the runner is stopping
// (cancelled/runner-stopped); a handover leaves it to the successor. Every path that is missing or
// cannot be copied is a line in the setup log, never a failure of the run.
func (e *execution) collectOutputs(ctx context.Context, sess executor.Session) {
	if len(e.wf.Outputs) == 0 {
		return
	}
	sl := e.setup
	if e.past.outputsCollected {
		sl.printf("outputs: packed by the earlier runner process already\n")
		return
	}
	if !e.stepRan {
		sl.printf("outputs: not collected: no step ran\n")
		return
	}
	if errors.Is(context.Cause(ctx), ErrRunnerStopped) {
		// Stopping (SIGINT) must not wait for a long copy.
		sl.printf("outputs: not collected: the runner is stopping\n")
		return
	}
	sink, ok := e.rep.(OutputsSink)
	if !ok || e.job.OutputsDir == "" {
		sl.printf("outputs: not collected: knotless-run exec stores no outputs (with the shell executor the steps' files stay where they wrote them; a job pod is deleted with them)\n")
		return
	}
	roots, err := outputs.Roots(e.wf.Outputs)
	if err != nil {
		sl.printf("outputs: not collected: %v\n", err)
		return
	}
	// The run's own context may have ended (a timeout, a cancel): the
	// copy has its own bound, and a handover cuts it short.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), OutputsTimeout)
	defer cancel()
	defer e.onHandover(cancel)()
	start := time.Now()
	dir := e.job.OutputsDir
	if err := cleanup.RemoveAll(dir, e.log); err != nil {
		sl.printf("outputs: not collected: empty %s: %v\n", dir, err)
		return
	}
	defer func() {
		if err := cleanup.RemoveAll(dir, e.log); err != nil {
			e.log.Warn("remove copied outputs", "err", err)
		}
	}()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		sl.printf("outputs: not collected: %v\n", err)
		return
	}
	found, shown := e.copyOutputs(cctx, sess, dir, roots)
	if e.handedOver() {
		return // the successor collects them
	}
	if len(found) == 0 {
		sl.printf("outputs: nothing to store\n")
		return
	}
	var per map[string]outputs.Stats
	var total outputs.Stats
	rec, err := sink.StoreOutputs(func(w io.Writer) (int, error) {
		var err error
		total, per, err = outputs.Pack(cctx, w, dir, found)
		return total.Entries, err
	})
	if err != nil {
		if e.handedOver() {
			return
		}
		sl.printf("outputs: not stored: packing them failed: %v\n", err)
		e.noSpace(err, "outputs not stored")
		return
	}
	for _, r := range found {
		st := per[r]
		sl.printf("outputs: collected %s: %s in %s\n", shown[r], byteCount(st.Bytes), entryCount(st.Entries))
	}
	sl.printf("outputs: archive of %s, %s (%d bytes), sha256 %s, packed in %s; it goes to the server before the result\n",
		entryCount(total.Entries), byteCount(rec.Size), rec.Size, rec.SHA256, time.Since(start).Round(time.Millisecond))
	e.log.Info("outputs packed", "entries", total.Entries, "bytes", rec.Size, "sha256", rec.SHA256)
}

// copyOutputs copies each of roots (slash-separated paths relative to the
// workdir) out of sess into dir, and returns those copied and how the
// setup log shows each (a directory with a trailing slash). A root that
// cannot be copied is a line of the setup log; a handover stops the copy.
func (e *execution) copyOutputs(ctx context.Context, sess executor.Session, dir string, roots []string) (found []string, shown map[string]string) {
	sl := e.setup
	shown = map[string]string{}
	for _, r := range roots {
		dst := filepath.Join(dir, filepath.FromSlash(r))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			sl.printf("outputs: %s: not collected: %v\n", r, err)
			continue
		}
		err := sess.CopyOut(ctx, r, dst)
		switch {
		case err == nil:
			fi, serr := os.Lstat(dst)
			if serr != nil {
				sl.printf("outputs: %s: not collected: the executor copied nothing\n", r)
				continue
			}
			found = append(found, r)
			shown[r] = r
			if fi.IsDir() && r != "." {
				shown[r] = r + "/"
			}
		case e.handedOver():
			return nil, nil
		case errors.Is(err, fs.ErrNotExist):
			sl.printf("outputs: %s does not exist: not collected\n", r)
		default:
			sl.printf("outputs: %s: not collected: %v\n", r, err)
			e.noSpace(err, "outputs: "+r+" not collected")
		}
	}
	return found, shown
}

func entryCount(n int) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}

// byteCount is n in bytes with a binary unit (e.g. "5.0 MiB").
func byteCount(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
