package executor

import (
	"context"

	"knotless.dev/knotless/internal/agent"
)

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

// CacheFetcher is the direct route of a shared cache's entry: where the
// environment may reach the object store, it downloads the entry's
// archive itself from a presigned URL, so the bytes cross neither the
// runner nor the link between the runner and the environment (the
// Kubernetes API server's exec stream). A Cacher may implement it; the
// runner calls it only where the operator said the environment reaches
// the store, and restores through RestoreCache when it fails. Like
// RestoreCache, it must not be called concurrently with the session's
// other methods; canceling ctx aborts it.
type CacheFetcher interface {
	// FetchCache downloads src (an archive: the copy-format tar of an
	// entry's directory, compressed as src says) in the environment and
	// unpacks its top-level members: members maps a member's name ("0",
	// "1", ...: the entry's path indexes) to its absolute path as the
	// steps see it, a directory merged into one already there as
	// RestoreCache merges; members not listed (entry.json) are skipped.
	// It returns the names of the listed members the archive held (a
	// path absent when the entry was saved has none). Errors: one
	// wrapping ErrFetchUnsupported when the environment cannot fetch (an
	// older step agent: nothing was tried); else the fetch failed (the
	// store unreachable from the environment, no byte for a while, a
	// refused or expired URL, bytes that are not src's SHA-256, a disk
	// full), and every file, directory and link it made is removed again
	// (a file it replaced in a directory already there stays replaced).
	FetchCache(ctx context.Context, src FetchSource, members map[string]string) ([]string, error)
}

// FetchSource is an archive for CacheFetcher: a URL that reads it with a
// plain GET and no credentials (objstore.Bucket.PresignGet), its length
// in bytes and SHA-256 (hex) as the store keeps them, and its compression
// ("" or "zstd").
type FetchSource struct {
	URL         string
	Bytes       int64
	SHA256      string
	Compression string
}

// ErrFetchUnsupported is wrapped by FetchCache's error when the
// environment cannot fetch an archive itself (its step agent is older
// than the capability): the runner restores through RestoreCache. It is
// agent.ErrFetchUnsupported.
var ErrFetchUnsupported = agent.ErrFetchUnsupported
