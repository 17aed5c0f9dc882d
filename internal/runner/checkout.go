package runner

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
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
// The refs come from the server's advertisement (one GET of info/refs);
// the objects they name that the mirror lacks come in one more request
// (fetchPackWants). A repository that is not on an HTTP server (a path, as
// in tests) gets them by `git fetch` into the mirror's refs/heads/* and
// refs/tags/* instead (syncRefs).

// serverRefs returns the server's branches and tags for f, with their
// objects in the mirror, and whether it fetched any. A failure is a line
// in log, not a failed checkout (the commit is there; names may be
// missing): the result is then what the mirror knows.
func serverRefs(ctx context.Context, mirror string, f Fetch, log io.Writer) ([]ref, bool) {
	if strings.HasPrefix(f.URL, "http://") || strings.HasPrefix(f.URL, "https://") {
		refs, err := advertisedRefs(ctx, f.URL, f.Token)
		if err == nil {
			var wants []string
			for _, r := range refs {
				if wanted(f, r) && !hasObject(mirror, r.oid) && !slices.Contains(wants, r.oid) {
					wants = append(wants, r.oid)
				}
			}
			if len(wants) == 0 {
				return refs, false
			}
			fmt.Fprintf(log, "fetching %d branches and tags from %s\n", len(wants), withoutCredential(f.URL))
			if err = fetchPackWants(ctx, mirror, f.URL, wants, f.Token); err == nil {
				return refs, true
			}
		}
		if ctx.Err() != nil {
			return nil, false
		}
		fmt.Fprintf(log, "getting the branches and tags in one request failed (%v); trying git fetch\n", err)
	}
	syncRefs(ctx, mirror, f, log)
	refs, err := mirrorRefs(ctx, mirror)
	if err != nil {
		fmt.Fprintf(log, "warning: could not list the branches and tags: %v\n", err)
	}
	return refs, true
}

// wanted says whether the checkout of f takes r's objects: every branch
// and, as checkout.tags says, every tag or only f.Ref's.
func wanted(f Fetch, r ref) bool {
	return strings.HasPrefix(r.name, "refs/heads/") || f.Checkout.Tags || r.name == f.Ref
}

// syncRefs brings the mirror's branches and tags (or only f.Ref's tag,
// without checkout.tags) up to date with the server by `git fetch`. A
// failure is a line in log.
func syncRefs(ctx context.Context, mirror string, f Fetch, log io.Writer) {
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
}

// mirrorTags makes the mirror's refs/tags/* the tags of refs (the
// server's), so that a shallow fetch from the mirror follows them.
func mirrorTags(ctx context.Context, mirror string, refs []ref) error {
	have, err := mirrorRefs(ctx, mirror)
	if err != nil {
		return err
	}
	var cmds bytes.Buffer
	keep := map[string]bool{}
	for _, r := range refs {
		if strings.HasPrefix(r.name, "refs/tags/") {
			keep[r.name] = true
			fmt.Fprintf(&cmds, "update %s %s\n", r.name, r.oid)
		}
	}
	for _, r := range have {
		if strings.HasPrefix(r.name, "refs/tags/") && !keep[r.name] {
			fmt.Fprintf(&cmds, "delete %s\n", r.name)
		}
	}
	if cmds.Len() == 0 {
		return nil
	}
	cmd := exec.CommandContext(ctx, "git", "-C", mirror, "update-ref", "--stdin")
	cmd.Env = gitEnv(nil)
	cmd.Stdin = &cmds
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git update-ref: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
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
// and tags (see above; all, the server's branches and tags) as a
// packed-refs file, and the branch's upstream in its config.
func writeWorkspaceRefs(dest string, f Fetch, all []ref) error {
	branch, onBranch := strings.CutPrefix(f.Ref, "refs/heads/")
	shallow := f.Checkout.Depth > 0
	var refs []ref
	if f.Ref != "" {
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
