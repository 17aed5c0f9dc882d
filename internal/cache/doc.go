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
//
// # Shared through a bucket
//
// With Options.Bucket (knotless-run run --cache-store), the bucket is the
// truth every runner of it shares, and the directory above a read-through
// copy of it, bounded as before. Find looks on this disk for the exact
// key, then in the bucket (the exact key, else each restore key's name
// prefix, listed); an entry this disk lacks is downloaded into tmp/ while
// its SHA-256 is computed, unpacked, checked against the SHA-256 the
// saver wrote into the object's metadata and against the entry.json it
// holds (repository, key, paths), and committed like a save. A mismatch
// removes the object (the run's save replaces it) and is a miss. Upload,
// after a local Commit, archives the entry (tar, zstd) into tmp/ and
// writes it with PutIfAbsent: S3 makes an object visible only once whole,
// and of two runners saving one key the second writes nothing. Among
// entries matching a restore key the newest is the one whose upload
// completed last, by the store's clock (the same for every runner), ties
// broken by the saver's creation time; entries this disk holds but never
// uploaded count only when the bucket has none.
//
// A bucket that fails (down, slow, full, refusing the credentials, no
// such bucket, 503s) never fails a caller: Find goes on with the disk
// alone and says why in Found.Fault, Upload returns the store's one-line
// error, and every call is bounded (DefaultLookupTimeout for a lookup,
// DefaultIdleTimeout without progress and DefaultTransferTimeout in all
// for a transfer).
//
// Object names (below the bucket's prefix):
//
//	v1/<ID(repo)>/<ID(paths)>/<hex of the key's first 256 bytes, a "/" every 128 digits>~<ID(key)>.tzst
//	... .used: the entry's last-use marker, rewritten on each hit
//
// Why a crafted key cannot escape its repository: the repository's part
// is a hash of the repository's name, which the server gives, never the
// workflow; the key is written only in lower-case hex digits and the
// hash of the whole key, so no key can make a "/", "..", "%" or any
// component of its own, and nothing in a name comes from the key
// unencoded. Hex spells byte by byte, so a restore key's spelling is a
// prefix of the spelling of every key that starts with it: a listing of
// that name prefix finds exactly those entries (restore keys longer than
// the spelled 256 bytes are checked against the key in the metadata). The
// names also suit stores that keep objects as files (versitygw): every
// object's last component holds "~", which no directory's does, so no
// object is ever a prefix-directory of another; components are at most
// 166 bytes (file systems allow 255); a whole name is at most 622 bytes
// beyond the bucket's prefix (S3 allows 1024). And a downloaded entry
// is committed only when its entry.json names the repository, key and
// paths asked for.
package cache
