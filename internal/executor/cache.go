package executor

import "context"

// Cacher is the seam for the workflow's `caches:`. The runner's core does
// the cache logic once (keys, hashFiles, lookup, hit or miss, when to save,
// the store and its eviction: package cache); a session only moves bytes
// between a directory on the runner's disk and a path in its environment.
// A Session that does not implement Cacher gets the generic path: CopyIn
// and CopyOut, with $HOME unknown (paths under ~ are then not cached).
//
// Paths are absolute, as the steps see them (under Workdir or Home); the
// runner has checked that they stay there. Like CopyIn and CopyOut, the
// methods must not be called concurrently with Exec, CopyIn or CopyOut on
// the session, and canceling ctx aborts them (the runner discards what a
// cancelled save staged).
type Cacher interface {
	// Home is $HOME as the steps see it (absolute).
	Home(ctx context.Context) (string, error)

	// RestoreCache puts src, a file or directory of a cache entry on the
	// runner's disk, at dst in the environment, merging into a directory
	// already there. src must stay unchanged: whatever a step later does
	// to dst never reaches src (an executor copies, clones extents, or
	// mounts src read-only below a writable layer; it never hard-links).
	RestoreCache(ctx context.Context, src, dst string) error

	// SaveCache puts src in the environment at stage, a path that does not
	// exist yet on the runner's disk, on the cache store's file system.
	// The runner calls it only after the last step, once outputs are
	// collected, so an executor whose environment lives on that file
	// system may move src there (rename) instead of copying. A src that
	// does not exist is an error wrapping fs.ErrNotExist.
	SaveCache(ctx context.Context, src, stage string) error
}
