package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/logmask"
	"knotless.dev/knotless/internal/outputs"
	"knotless.dev/knotless/internal/workflow"
)

// What passes between the runs of a pipeline (`needs:`): before the first
// step, receiveNeeds puts each needed run's outputs and exported values
// into the checkout (workflow.NeedPaths); after the last, collectExports
// reads the values the steps wrote to $KNOTLESS_EXPORT for the runs that
// need this one.

// needFetchAttempts bounds the downloads of one need's outputs that
// arrive with another SHA-256 than the server recorded.
const needFetchAttempts = 3

// combo is the job's matrix values as the workflow package has them.
func (j *Job) combo() workflow.Combo {
	c := workflow.Combo{}
	for _, v := range j.Matrix {
		c = append(c, workflow.MatrixValue{Name: v.Name, Value: v.Value})
	}
	return c
}

// receiveNeeds puts what the runs the job needs left into the checkout on
// this host, before the environment sees it: each one's outputs, verified
// against the SHA-256 the server recorded, under
// .knotless/needs/NEED[/VALUES]/, and its exported values in the .env
// file beside. An error ends the run errored (checkout): its inputs are
// not all there.
func (e *execution) receiveNeeds(ctx context.Context) error {
	if len(e.job.Needs) == 0 {
		return nil
	}
	sl := e.setup
	for _, n := range e.job.Needs {
		c := workflow.Combo{}
		for _, v := range n.Matrix {
			c = append(c, workflow.MatrixValue{Name: v.Name, Value: v.Value})
		}
		dir, values := workflow.NeedPaths(n.Name, c)
		root, err := os.OpenRoot(e.job.Workspace)
		if err != nil {
			return fmt.Errorf("needs %s (run %d): %w", n.Name, n.Run, err)
		}
		err = root.MkdirAll(path.Dir(values), 0o755)
		if err == nil {
			err = root.WriteFile(values, workflow.FormatExports(n.Exports), 0o644)
		}
		root.Close()
		if err != nil {
			return fmt.Errorf("needs %s (run %d): write %s: %w", n.Name, n.Run, values, err)
		}
		what := fmt.Sprintf("needs %s: run %d (%s)", n.Name, n.Run, n.Workflow)
		if n.Outputs == nil {
			sl.printf("%s: no outputs; %d exported values in %s\n", what, len(n.Exports), values)
			continue
		}
		st, err := e.fetchNeed(ctx, n, filepath.Join(e.job.Workspace, filepath.FromSlash(dir)))
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		sl.printf("%s: outputs (%s, %s, sha256 %s verified) in %s/; %d exported values in %s\n",
			what, entryCount(st.Entries), byteCount(n.Outputs.Size), short(n.Outputs.SHA256), dir, len(n.Exports), values)
	}
	return nil
}

// resolveNeedsImages puts the values the needed runs exported into the
// images of wf that name them (`{{ needs.NAME.VAR }}`, the workflow's and
// its services'; workflow.ResolveNeedsRefs), before any environment is
// made. The error names the image and why it cannot be known.
func (e *execution) resolveNeedsImages(wf *workflow.Workflow) error {
	ex := workflow.NeedsExports{}
	for _, n := range e.job.Needs {
		ex[n.Name] = append(ex[n.Name], n.Exports)
	}
	img, err := workflow.ResolveNeedsRefs(wf.Image, ex)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if img != wf.Image {
		e.setup.printf("image %s (from the needed runs' exports: %s)\n", img, wf.Image)
		wf.Image = img
	}
	for i, s := range wf.Services {
		img, err := workflow.ResolveNeedsRefs(s.Image, ex)
		if err != nil {
			return fmt.Errorf("services.%s image: %w", s.Name, err)
		}
		wf.Services[i].Image = img
	}
	return nil
}

// fetchNeed downloads need's outputs archive, checks its size and SHA-256
// against the claim's, and unpacks it into dst.
func (e *execution) fetchNeed(ctx context.Context, n api.NeededRun, dst string) (outputs.Stats, error) {
	if e.job.NeedOutputs == nil {
		return outputs.Stats{}, errors.New("this runner cannot fetch the outputs of other runs (no server)")
	}
	tmp, err := os.CreateTemp(filepath.Dir(e.job.Workspace), ".need-*.tar")
	if err != nil {
		return outputs.Stats{}, err
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	var lastErr error
	for attempt := 1; attempt <= needFetchAttempts; attempt++ {
		if err := ctx.Err(); err != nil {
			return outputs.Stats{}, err
		}
		if lastErr = e.download(ctx, n, tmp); lastErr == nil {
			break
		}
		e.setup.printf("needs %s: download of run %d's outputs, attempt %d of %d: %v\n", n.Name, n.Run, attempt, needFetchAttempts, lastErr)
		if attempt < needFetchAttempts {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(attempt) * time.Second):
			}
		}
	}
	if lastErr != nil {
		return outputs.Stats{}, lastErr
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return outputs.Stats{}, err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return outputs.Stats{}, err
	}
	st, err := outputs.Unpack(ctx, tmp, dst)
	if err != nil {
		return st, fmt.Errorf("unpack run %d's outputs: %w", n.Run, err)
	}
	return st, nil
}

// download writes need's outputs archive to tmp (from its start) and
// checks it.
func (e *execution) download(ctx context.Context, n api.NeededRun, tmp *os.File) error {
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := tmp.Truncate(0); err != nil {
		return err
	}
	body, err := e.job.NeedOutputs(ctx, n.Run)
	if err != nil {
		return err
	}
	defer body.Close()
	h := sha256.New()
	got, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(body, n.Outputs.Size+1))
	if err != nil {
		return err
	}
	if sum := hex.EncodeToString(h.Sum(nil)); got != n.Outputs.Size || sum != n.Outputs.SHA256 {
		return fmt.Errorf("arrived as %d bytes with sha256 %s, but the server recorded %d bytes with sha256 %s", got, short(sum), n.Outputs.Size, short(n.Outputs.SHA256))
	}
	return nil
}

// collectExports reads the export file the steps wrote (workflow.ExportFile)
// out of the environment and returns its values, every secret masked; the
// setup log says what was exported and what was skipped. Its error, only
// when the step agent is gone (executor.ErrEnvironmentGone: the environment is), is for
// afterSteps to say once.
func (e *execution) collectExports(ctx context.Context, sess executor.Session) (map[string]string, error) {
	if !e.stepRan {
		return nil, nil
	}
	dir, err := os.MkdirTemp(filepath.Dir(e.job.Workspace), ".export-")
	if err != nil {
		e.setup.printf("exports: not read: %v\n", err)
		return nil, nil
	}
	defer os.RemoveAll(dir)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	dst := filepath.Join(dir, "export.env")
	if err := sess.CopyOut(cctx, workflow.ExportFile, dst); err != nil {
		if errors.Is(err, executor.ErrEnvironmentGone) {
			return nil, err
		}
		if !errors.Is(err, fs.ErrNotExist) {
			e.setup.printf("exports: %s not read: %v\n", workflow.ExportFile, err)
		}
		return nil, nil
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		e.setup.printf("exports: %s not read: %v\n", workflow.ExportFile, err)
		return nil, nil
	}
	values, problems := workflow.ParseExports(b)
	for _, p := range problems {
		e.setup.printf("exports: %s\n", logmask.String(p, e.secrets))
	}
	names := make([]string, 0, len(values))
	for k, v := range values {
		values[k] = logmask.String(v, e.secrets)
		names = append(names, k)
	}
	sort.Strings(names)
	if len(values) > 0 {
		e.setup.printf("exports: %s (for the runs that need this one)\n", strings.Join(names, ", "))
	}
	return values, nil
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12] + "..."
	}
	return sum
}
