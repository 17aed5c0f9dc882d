package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/outputs"
)

// showOutputs is how many entries of a run's outputs `run show` lists.
const showOutputs = 100

// listOutputs reads one page of run's outputs entries (limit 0: the
// server's default page), after cursor ("" from the first).
func (s *session) listOutputs(ctx context.Context, run int64, limit int, cursor string) (api.RunOutputs, error) {
	p := url.Values{"run": {strconv.FormatInt(run, 10)}}
	if limit > 0 {
		p.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		p.Set("cursor", cursor)
	}
	var out api.RunOutputs
	if err := s.query(ctx, api.MethodListOutputs, p, &out); err != nil {
		return out, fmt.Errorf("list outputs of run %d: %w", run, err)
	}
	return out, nil
}

// printOutputs prints the outputs section of `run show`.
func (s *session) printOutputs(ctx context.Context, w io.Writer, r api.Run) error {
	o := r.Outputs
	fmt.Fprintf(w, "\nOutputs: %s, %s in files; archive %s, sha256 %s\n", entries(int(o.Files)), size(o.Bytes), size(o.Size), o.SHA256)
	page, err := s.listOutputs(ctx, r.ID, min(showOutputs, o.Files), "")
	if err != nil {
		return err
	}
	t := newTable(w, "PATH", "SIZE")
	for _, e := range page.Entries {
		switch e.Kind {
		case api.OutputDir:
			t.row(e.Path+"/", "")
		case api.OutputSymlink:
			t.row(e.Path+" -> "+e.Target, "")
		default:
			t.row(e.Path, size(e.Size))
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	if more := o.Files - len(page.Entries); more > 0 {
		fmt.Fprintf(w, "... and %d more\n", more)
	}
	fmt.Fprintf(w, "Download: knotless run outputs %d\n", r.ID)
	return nil
}

// runOutputsOptions is `knotless run outputs ID`.
type runOutputsOptions struct {
	Dir string // -o: "" for ./run-ID-outputs
	id  int64
	dir string // where to unpack
}

func (s *session) runOutputsCmd() *cobra.Command {
	o := &runOutputsOptions{}
	cmd := &cobra.Command{
		Use:   "outputs ID [-o DIR]",
		Short: "Download a run's outputs and unpack them into a directory",
		Long: `Download the outputs a run stored (the files and directories its workflow
lists under outputs:) and unpack them into DIR, by their paths relative to
the checkout: dist/app.bin becomes DIR/dist/app.bin.

DIR defaults to ./run-ID-outputs. It must not exist or be empty: nothing is
ever overwritten. The archive is downloaded beside DIR first and its SHA-256
checked against what the server recorded before anything is unpacked; a
path that would leave DIR, or a symbolic link pointing out of it, is
refused. Permission bits and modification times are kept (directories stay
writable by you).

Outputs are files as the steps wrote them: unlike logs, nothing in them is
masked. Only the repository's owner and admins may download them. See the
list with knotless run show ID.`,
		Example: `  knotless run outputs 42
  knotless run outputs 42 -o ./artifacts`,
		Args: exactArgs(1, "one run ID"),
		RunE: s.runE(o),
	}
	cmd.Flags().StringVarP(&o.Dir, "output", "o", "", "directory to unpack into (default ./run-ID-outputs; must not exist or be empty)")
	return cmd
}

// complete reads the ID (a usage error if it is not a positive number) and
// names the default directory after it.
func (o *runOutputsOptions) complete(_ context.Context, _ *session, args []string) (err error) {
	if o.id, err = parseRunID(args[0]); err != nil {
		return err
	}
	o.dir = o.Dir
	if o.dir == "" {
		o.dir = fmt.Sprintf("run-%d-outputs", o.id)
	}
	return nil
}

// validate accepts any directory: whether it is empty is known only when
// the download starts (downloadOutputs).
func (o *runOutputsOptions) validate() error { return nil }

func (o *runOutputsOptions) run(ctx context.Context, s *session) error {
	return s.downloadOutputs(ctx, o.id, o.dir)
}

// downloadOutputs fetches run's archive into a temporary file beside dir,
// verifies it, and unpacks it into dir.
func (s *session) downloadOutputs(ctx context.Context, id int64, dir string) error {
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return failf("%s exists and is not empty: nothing is overwritten; choose another directory with -o", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return failf("%s: %v", dir, err)
	}
	r, err := s.getRun(ctx, id)
	if err != nil {
		return err
	}
	if r.Outputs == nil {
		why := ""
		if !api.IsFinal(r.State) {
			why = " yet (it is " + r.State + ": outputs are stored when its steps end)"
		}
		return &exitError{code: ExitNotFound, msg: fmt.Sprintf("run %d stored no outputs%s; see knotless run logs %d", id, why, id)}
	}
	c, err := s.api()
	if err != nil {
		return err
	}
	parent := filepath.Dir(filepath.Clean(dir))
	tmp, err := os.CreateTemp(parent, fmt.Sprintf(".run-%d-outputs-*.tar", id))
	if err != nil {
		return failf("create a temporary file beside %s: %v", dir, err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	resp, err := c.Do(ctx, http.MethodGet, api.MethodGetOutputs, url.Values{"run": {strconv.FormatInt(id, 10)}}, "", nil)
	if err != nil {
		return fmt.Errorf("download outputs of run %d: %w", id, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("download outputs of run %d: %w", id, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if n != r.Outputs.Size || sum != r.Outputs.SHA256 {
		return failf("the outputs of run %d arrived as %d bytes with sha256 %s, but the server recorded %d bytes with sha256 %s: nothing was unpacked; try again",
			id, n, sum, r.Outputs.Size, r.Outputs.SHA256)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return failf("create %s: %v", dir, err)
	}
	st, err := outputs.Unpack(ctx, tmp, dir)
	if err != nil {
		return failf("unpack outputs of run %d into %s: %v (what was unpacked before stays)", id, dir, err)
	}
	fmt.Fprintf(s.stdout(), "Unpacked %s (%s in files) of run %d into %s (sha256 %s verified)\n",
		entries(int(st.Entries)), size(st.Bytes), id, dir, sum)
	return nil
}

// entries is "1 entry" or "N entries".
func entries(n int) string { return plural(n, "1 entry", fmt.Sprintf("%d entries", n)) }
