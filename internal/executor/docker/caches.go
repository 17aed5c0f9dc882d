package docker

import (
	"path/filepath"
	"strings"

	"knotless.dev/knotless/internal/cache"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// hostCaches gives a session prepared by this process the fast cache path
// for the checkout, which is a bind mount of host (the runner's own
// directory, on the disk of the cache store): a restore copies the entry
// there on the host (copy_file_range: extent clones where the file system
// can) and gives the copy to the job's user; a save renames the directory
// out of it. Paths under HOME (a tmpfs of the container) go through the
// agent's stream, zstd-compressed and checksummed, as on kube. A
// recovered session has the stream for every path (its runner does not
// save caches: only the process that restored them knows their hits).
func hostCaches(env *agentenv.Env, workdir, host string, runAs RunAs) {
	workdir, host = filepath.Clean(workdir), filepath.Clean(host)
	env.HostPath = func(p string) (string, string, bool) {
		p = filepath.Clean(p)
		if p != workdir && !strings.HasPrefix(p, workdir+"/") {
			return "", "", false
		}
		return filepath.Join(host, strings.TrimPrefix(p, workdir)), host, true
	}
	env.HostChown = func(p string) error { return cache.GiveTree(host, p, int(runAs.UID), int(runAs.GID)) }
}
