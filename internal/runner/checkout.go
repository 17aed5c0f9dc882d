package runner

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// What a checkout holds besides the commit, as other CI systems give it:
//
//   - HEAD on the run's branch (refs/heads/B at the commit, tracking
//     origin/B), detached for a tag or anything else;
//   - refs/remotes/origin/* for every branch the server has (origin/B at
//     the run's commit), so `git log origin/main..` works;
//   - refs/tags/* for every tag of the server (checkout.tags, the
//     default), else only the run's own tag;
//   - with checkout.depth N, only the last N commits (a shallow
//     repository, as `git clone --depth N` makes), the tags among them and
//     origin/B.
//
// The mirror keeps the server's branches and tags as its own refs/heads/*
// and refs/tags/*, brought up to date (pruned) by one `git fetch` per run.

// syncRefs brings the mirror's branches and tags (or only f.Ref's tag,
// without checkout.tags) up to date with the server, and reports whether
// it tried (anything may have arrived). A failure is a line in log, not a
// failed checkout: the commit is there; only names may be stale.
func syncRefs(ctx context.Context, mirror string, f Fetch, log io.Writer) bool {
	specs := []string{"+refs/heads/*:refs/heads/*"}
	switch {
	case f.Checkout.Tags:
		specs = append(specs, "+refs/tags/*:refs/tags/*")
	case strings.HasPrefix(f.Ref, "refs/tags/"):
		specs = append(specs, "+"+f.Ref+":"+f.Ref)
	}
	fmt.Fprintf(log, "updating branches and tags from %s\n", withoutCredential(f.URL))
	var out bytes.Buffer
	args := append([]string{"-c", "fetch.unpackLimit=1", "-c", "maintenance.auto=false",
		"fetch", "--prune", "--no-tags", "--no-write-fetch-head", "-q", f.URL}, specs...)
	if err := git(ctx, mirror, authEnv(f.Token), &out, args...); err != nil {
		_, _ = log.Write(out.Bytes())
		fmt.Fprintf(log, "warning: could not update the branches and tags: %v; the checkout's origin/* and tags may be stale or missing\n", err)
	}
	return true
}

// shallowFetch gives the workspace dest (a .git without objects) the
// last f.Checkout.Depth commits of f.SHA from the mirror, with the tags
// that point into them when f.Checkout.Tags (else only f.Ref's tag), as
// `git clone --depth` does.
func shallowFetch(ctx context.Context, mirror, dest string, f Fetch, log io.Writer) error {
	const tmpRef = "refs/knotless/checkout"
	args := []string{"-c", "maintenance.auto=false", "-c", "protocol.file.allow=always", "fetch", "-q",
		"--depth=" + strconv.Itoa(f.Checkout.Depth), "--no-write-fetch-head"}
	if !f.Checkout.Tags {
		args = append(args, "--no-tags")
	}
	args = append(args, "file://"+mirror, "+"+f.SHA+":"+tmpRef)
	if !f.Checkout.Tags && strings.HasPrefix(f.Ref, "refs/tags/") {
		args = append(args, "+"+f.Ref+":"+f.Ref)
	}
	if err := git(ctx, dest, nil, log, args...); err != nil {
		return fmt.Errorf("shallow fetch of %d commits: %w", f.Checkout.Depth, err)
	}
	return git(ctx, dest, nil, log, "update-ref", "-d", tmpRef)
}

// ref is one line of packed-refs: a name, its object and, for an
// annotated tag, the object it peels to.
type ref struct{ name, oid, peeled string }

// mirrorRefs lists the mirror's branches and tags.
func mirrorRefs(ctx context.Context, mirror string) ([]ref, error) {
	var out bytes.Buffer
	if err := git(ctx, mirror, nil, &out, "for-each-ref", "--format=%(objectname) %(refname) %(*objectname)", "refs/heads", "refs/tags"); err != nil {
		return nil, err
	}
	var refs []ref
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		r := ref{oid: fs[0], name: fs[1]}
		if len(fs) > 2 {
			r.peeled = fs[2]
		}
		refs = append(refs, r)
	}
	return refs, sc.Err()
}

// writeWorkspaceRefs gives the workspace dest its HEAD, branch, origin/*
// and tags (see above) as a packed-refs file, and the branch's upstream in
// its config.
func writeWorkspaceRefs(ctx context.Context, mirror, dest string, f Fetch) error {
	branch, onBranch := strings.CutPrefix(f.Ref, "refs/heads/")
	shallow := f.Checkout.Depth > 0
	var refs []ref
	if f.Ref != "" {
		all, err := mirrorRefs(ctx, mirror)
		if err != nil {
			return fmt.Errorf("list the mirror's branches and tags: %w", err)
		}
		for _, r := range all {
			switch {
			case strings.HasPrefix(r.name, "refs/heads/"):
				if !shallow && r.name != f.Ref {
					refs = append(refs, ref{name: "refs/remotes/origin/" + strings.TrimPrefix(r.name, "refs/heads/"), oid: r.oid})
				}
			case shallow:
				// the shallow fetch brought the tags whose objects it has
			case f.Checkout.Tags || r.name == f.Ref:
				refs = append(refs, r)
			}
		}
	}
	git := filepath.Join(dest, ".git")
	if onBranch {
		refs = append(refs, ref{name: f.Ref, oid: f.SHA}, ref{name: "refs/remotes/origin/" + branch, oid: f.SHA})
		if err := os.WriteFile(filepath.Join(git, "HEAD"), []byte("ref: "+f.Ref+"\n"), 0o644); err != nil {
			return err
		}
		cfg, err := os.OpenFile(filepath.Join(git, "config"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		// A subsection name in git's config: quoted, with " and \ escaped
		// (Go's %q would escape non-ASCII bytes, which git reads literally).
		q := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
		_, err = fmt.Fprintf(cfg, "[branch \"%s\"]\n\tremote = origin\n\tmerge = \"%s\"\n", q.Replace(branch), q.Replace(f.Ref))
		if cerr := cfg.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if len(refs) == 0 {
		return nil
	}
	slices.SortFunc(refs, func(a, b ref) int { return strings.Compare(a.name, b.name) })
	var b bytes.Buffer
	b.WriteString("# pack-refs with: peeled fully-peeled sorted \n")
	for _, r := range refs {
		fmt.Fprintf(&b, "%s %s\n", r.oid, r.name)
		if r.peeled != "" {
			fmt.Fprintf(&b, "^%s\n", r.peeled)
		}
	}
	return os.WriteFile(filepath.Join(git, "packed-refs"), b.Bytes(), 0o644)
}
