// Package cache is the runner's cache store: the directories a workflow's
// `caches:` saves after a successful run and restores into later runs, kept
// on the runner's disk (--work DIR/caches) and bounded in size by LRU
// eviction (--cache-size).
//
// Layout under the store's directory:
//
//	tmp/                           entries being saved, and evicted ones being
//	                               removed; emptied by Open (a save a killed
//	                               runner left is swept, never seen)
//	repos/<repo-id>/<entry-id>/    one whole entry: entry.json (key, sizes,
//	                               when saved; its mtime is the last use) and
//	                               one directory (or file) per cache path,
//	                               named by the path's index: 0, 1, ...
//
// repo-id and entry-id are SHA-256 prefixes of the repository's name and
// of the paths and key, so an entry of one repository is never found by
// another's run, and one saved with other paths is never restored.
//
// An entry appears in repos/ only by one rename(2) of a complete directory,
// so a reader never sees a half-written entry, two saves of one key leave
// one whole entry (the second rename finds the first and discards its own),
// and a runner killed while saving leaves only tmp/ behind. The package
// must never restore an entry of another repository, never show a partly
// written entry, and never write anything the caller did not hand it (the
// runner writes no secret into a cache).
package cache
