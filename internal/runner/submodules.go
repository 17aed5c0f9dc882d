package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/workflow"
)

// Submodules (checkout.submodules) are checked out as `git submodule
// update --init` would, without git's submodule machinery: each one from
// its own mirror (by the commit the superproject's tree names), into its
// path, as a self-contained repository with a detached HEAD and its URL as
// origin; the superproject's config marks it active with that URL.
//
// A URL is taken from .gitmodules; a relative one (../lib.git) is resolved
// against the superproject's URL, as git does. A submodule on the same
// server is fetched with the run's token, which the server honours for the
// repositories of the run's owner only: any other is refused, and the
// checkout fails saying which. A submodule on another host is fetched
// without any credential (a public repository). No credential is ever
// written into a checkout.

// submodule is one entry of .gitmodules with its commit in the tree.
type submodule struct{ name, path, url, sha string }

// submodules checks out the submodules of the checkout dest of f (nested
// ones too with checkout.submodules recursive).
func (m *Mirrors) submodules(ctx context.Context, f Fetch, dest string, log io.Writer) error {
	subs, err := listSubmodules(ctx, dest)
	if err != nil {
		return fmt.Errorf("read the submodules: %w", err)
	}
	for _, s := range subs {
		sf, err := m.submoduleFetch(f, s)
		if err != nil {
			return fmt.Errorf("submodule %s: %w", s.path, err)
		}
		if f.Checkout.Submodules != workflow.SubmodulesRecursive {
			sf.Checkout.Submodules = workflow.SubmodulesNone
		}
		fmt.Fprintf(log, "submodule %s: %s at %s\n", s.path, withoutCredential(sf.URL), s.sha)
		dir := filepath.Join(dest, filepath.FromSlash(s.path))
		if err := insideCheckout(dest, dir); err != nil {
			return fmt.Errorf("submodule %s: %w", s.path, err)
		}
		if err := m.Checkout(ctx, sf, dir, log); err != nil {
			return fmt.Errorf("submodule %s (%s): %w", s.path, withoutCredential(sf.URL), err)
		}
		key := "submodule." + s.name
		if err := git(ctx, dest, nil, log, "config", key+".url", withoutCredential(sf.URL)); err != nil {
			return fmt.Errorf("submodule %s: %w", s.path, err)
		}
		if err := git(ctx, dest, nil, log, "config", key+".active", "true"); err != nil {
			return fmt.Errorf("submodule %s: %w", s.path, err)
		}
	}
	return nil
}

// submoduleFetch says where submodule s of the checkout of f comes from:
// on f's server (the same scheme, host and path prefix) with f's token,
// elsewhere anonymously.
func (m *Mirrors) submoduleFetch(f Fetch, s submodule) (Fetch, error) {
	raw := s.url
	if strings.HasPrefix(raw, "./") || strings.HasPrefix(raw, "../") {
		base, err := url.Parse(withoutCredential(f.URL))
		if err != nil {
			return Fetch{}, fmt.Errorf("resolve the relative URL %q: %w", raw, err)
		}
		if base.Scheme == "" {
			// A path (as in tests, or exec): git resolves it the same way.
			raw = path.Join(base.Path, raw)
		} else {
			base.Path = path.Join(base.Path, raw)
			raw = base.String()
		}
	}
	sub := Fetch{URL: raw, SHA: s.sha, Checkout: workflow.Checkout{Submodules: f.Checkout.Submodules}}
	server, ok := strings.CutSuffix(withoutCredential(f.URL), "/"+f.Repo+".git")
	if rest, same := strings.CutPrefix(withoutCredential(raw), server+"/"); ok && same {
		repo := strings.TrimSuffix(strings.TrimSuffix(rest, "/"), ".git")
		if err := api.CheckRepo(repo); err == nil {
			// The run's token, never a user name or password of .gitmodules.
			sub.Repo, sub.Token, sub.URL = repo, f.Token, withoutCredential(raw)
			return sub, nil
		}
	}
	if strings.HasPrefix(raw, "-") || strings.ContainsAny(raw, "\n\x00") {
		return Fetch{}, fmt.Errorf("URL %q is not a repository URL", raw)
	}
	// Another host: its own mirror, named by the URL, and no credential.
	h := sha256.Sum256([]byte(withoutCredential(raw)))
	sub.Repo = withoutCredential(raw)
	sub.URL = withoutCredential(raw)
	sub.mirror = filepath.Join(m.Root, ".external", hex.EncodeToString(h[:12])+".git")
	return sub, nil
}

// listSubmodules reads .gitmodules of the checkout dest and the commits
// its tree names at their paths; a .gitmodules entry without a commit in
// the tree (or the other way round) is skipped, as git does.
func listSubmodules(ctx context.Context, dest string) ([]submodule, error) {
	var cfg bytes.Buffer
	if err := git(ctx, dest, nil, &cfg, "config", "--file", ".gitmodules", "--null", "--get-regexp", `^submodule\..*\.(path|url)$`); err != nil {
		if !fileExists(filepath.Join(dest, ".gitmodules")) {
			return nil, nil
		}
		if cfg.Len() == 0 {
			return nil, nil // no entries: git exits 1
		}
		return nil, err
	}
	byName := map[string]*submodule{}
	for _, kv := range strings.Split(cfg.String(), "\x00") {
		k, v, ok := strings.Cut(kv, "\n")
		if !ok {
			continue
		}
		k = strings.TrimPrefix(k, "submodule.")
		var name, field string
		if n, ok := strings.CutSuffix(k, ".path"); ok {
			name, field = n, "path"
		} else if n, ok := strings.CutSuffix(k, ".url"); ok {
			name, field = n, "url"
		}
		s := byName[name]
		if s == nil {
			s = &submodule{name: name}
			byName[name] = s
		}
		if field == "path" {
			s.path = v
		} else {
			s.url = v
		}
	}
	var tree bytes.Buffer
	if err := git(ctx, dest, nil, &tree, "ls-tree", "-r", "-z", "HEAD"); err != nil {
		return nil, err
	}
	links := map[string]string{}
	for _, e := range strings.Split(tree.String(), "\x00") {
		meta, p, ok := strings.Cut(e, "\t")
		if fs := strings.Fields(meta); ok && len(fs) == 3 && fs[0] == "160000" {
			links[p] = fs[2]
		}
	}
	var out []submodule
	for _, s := range byName {
		sha, ok := links[s.path]
		if !ok || s.url == "" || !filepath.IsLocal(filepath.FromSlash(s.path)) {
			continue
		}
		s.sha = sha
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b submodule) int { return strings.Compare(a.path, b.path) })
	return out, nil
}

// insideCheckout checks that dir, once its parent's symbolic links are
// followed, is still inside dest: a link in the tree must not send a
// submodule's files elsewhere.
func insideCheckout(dest, dir string) error {
	root, err := filepath.EvalSymlinks(dest)
	if err != nil {
		return err
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(dir))
	if err != nil {
		return fmt.Errorf("its directory: %w", err)
	}
	if rel, err := filepath.Rel(root, parent); err != nil || !filepath.IsLocal(rel) && rel != "." {
		return fmt.Errorf("its path leaves the checkout through a symbolic link")
	}
	if fi, err := os.Lstat(dir); err == nil && !fi.IsDir() {
		return fmt.Errorf("its path is not a directory in the checkout")
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
