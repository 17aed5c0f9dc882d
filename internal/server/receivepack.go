package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"

	"knotless.dev/knotless/internal/store"
)

// A push's body is spooled whole to DATA/tmp before anything else happens
// to the repository: only then is the repository's lock taken and git
// http-backend run on the spool, so a pusher that stalls mid-body holds up
// no other push (nor its repository's fetches, which take no lock). A push
// that cannot fit (its Content-Length over the cap, or its repository's
// quota used up) is refused before any of its pack is read; one that goes
// past the cap while it arrives is cut there. The spool is removed on
// every way out, and at start (cleanTmp) after a crash.

// maxReportedRefs bounds the refs a refused push's answer names.
const maxReportedRefs = 100

// peekCommands caps what is read of a push refused before spooling: its
// commands, to answer in git's terms.
const peekCommands = 64 << 10

// pushCommands is what git's answer to a push needs of its request: the
// refs it updates (up to maxReportedRefs) and whether it asked for
// report-status and the side band.
type pushCommands struct {
	refs     []string
	report   bool
	sideband bool
	// valid is false for a body that opens with neither a command, a
	// shallow line, a push certificate nor a flush: no push at all.
	valid bool
}

var pushLineRE = regexp.MustCompile(`^(?:[0-9a-f]{40}(?:[0-9a-f]{24})? [0-9a-f]{40}(?:[0-9a-f]{24})? \S+|shallow [0-9a-f]{40}(?:[0-9a-f]{24})?|push-cert)$`)

// readPushCommands reads the command list that opens a push's body, up to
// its flush.
func readPushCommands(r *bufio.Reader) pushCommands {
	var c pushCommands
	for first := true; ; first = false {
		p, err := readPktLine(r)
		if err != nil {
			return c
		}
		if p == nil {
			c.valid = c.valid || first // git's probe is a lone flush
			return c
		}
		line, caps, _ := bytes.Cut(bytes.TrimSuffix(p, []byte("\n")), []byte{0})
		if first {
			c.valid = pushLineRE.Match(line)
			for _, cp := range strings.Fields(string(caps)) {
				c.report = c.report || cp == "report-status" || cp == "report-status-v2"
				c.sideband = c.sideband || cp == "side-band-64k"
			}
		}
		// "OLD NEW REF"; "shallow OID" lines come first from shallow clones.
		if f := strings.Fields(string(line)); len(f) == 3 && len(c.refs) < maxReportedRefs {
			c.refs = append(c.refs, f[2])
		}
	}
}

// refusePush answers a push with git's report of a failed unpack, which
// git shows as "error: remote unpack failed: MSG", and closes the
// connection: the rest of the body is not read. (The same message on the
// side band too would show it twice.)
func refusePush(w http.ResponseWriter, c pushCommands, msg string) {
	noCache(w)
	w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
	w.Header().Set("Connection", "close")
	var report bytes.Buffer
	if c.report {
		writePkt(&report, "unpack "+msg+"\n")
		for _, ref := range c.refs {
			writePkt(&report, "ng "+ref+" push refused\n")
		}
		report.WriteString("0000")
	}
	var out bytes.Buffer
	if c.sideband {
		for b := report.Bytes(); len(b) > 0; {
			n := min(len(b), 65515)
			writePkt(&out, "\x01"+string(b[:n]))
			b = b[n:]
		}
		out.WriteString("0000")
	} else {
		out.Write(report.Bytes())
	}
	_, _ = w.Write(out.Bytes())
}

// receivePack serves one push: it spools the body, then, holding the
// repository's lock, hands it to git and makes pipelines for the refs it
// created or updated.
func (s *Server) receivePack(w http.ResponseWriter, r *http.Request, repo store.Repo, user string) {
	if ct := r.Header.Get("Content-Type"); ct != "application/x-git-receive-pack-request" {
		http.Error(w, fmt.Sprintf("unsupported content type %q", ct), http.StatusUnsupportedMediaType)
		return
	}
	dir, err := s.repoDir(repo.Owner, repo.Name)
	if err != nil {
		s.log.Error("push: repository path", "repo", repo.FullName(), "err", err)
		http.Error(w, "internal error: this repository's stored name fails the name rule; the server's log says more", http.StatusInternalServerError)
		return
	}
	f, cmds, n, ok := s.spoolPush(w, r, repo, user, dir)
	if !ok {
		return
	}
	defer os.Remove(f.Name())
	defer f.Close()
	unlock, err := s.lockRepo(r.Context(), repo.ID)
	if err != nil {
		s.log.Error("git: lock repository for push", "repo", repo.FullName(), "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	defer unlock()
	// Another push may have landed meanwhile: the quota's last word.
	if q := s.cfg.RepoQuota; q > 0 {
		if used := dirSize(dir); used+n > q {
			refusePush(w, cmds, s.quotaMessage(repo, used, "this push of "+size(n)))
			return
		}
	}
	// Pipelines are made even if the pusher hangs up now.
	ctx := context.WithoutCancel(r.Context())
	before, err := s.refs(ctx, dir)
	if err != nil {
		s.log.Error("git: read refs before push", "repo", repo.FullName(), "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	// With a side band, what afterPush says goes before the answer's
	// end, as "remote:" lines (pushmessages.go).
	out := &heldFlush{ResponseWriter: w}
	if !cmds.sideband {
		out = nil
	}
	var rw http.ResponseWriter = w
	if out != nil {
		rw = out
	}
	s.httpBackend(rw, r, user, f, n)
	after, err := s.refs(ctx, dir)
	if err != nil {
		s.log.Error("git: read refs after push", "repo", repo.FullName(), "err", err)
		if out != nil {
			out.finish(nil)
		}
		return
	}
	lines := s.afterPush(ctx, repo, user, before, after)
	if out != nil {
		out.finish(lines)
	}
	s.pruneHeldCommits(ctx, repo, after)
}

// spoolPush reads a push's body (capped at --max-push-size, and at what
// is left of the repository's quota in dir) into a temporary file, and
// returns it rewound, with its command list and its size in bytes. ok
// false: the push was refused or failed, and w has the answer (a git
// error for the pusher, or an HTTP error); nothing is left on disk then.
// The caller closes and removes f.
func (s *Server) spoolPush(w http.ResponseWriter, r *http.Request, repo store.Repo, user, dir string) (f *os.File, cmds pushCommands, n int64, ok bool) {
	limit, quota := s.cfg.MaxPushSize, false
	tooLarge := fmt.Sprintf("push refused: it is larger than %s, this server's limit (knotless-server --max-push-size); "+
		"push fewer commits at a time, or ask the server's operator to raise the limit", size(s.cfg.MaxPushSize))
	var used int64
	if q := s.cfg.RepoQuota; q > 0 {
		used = dirSize(dir)
		if left := q - used; left < limit {
			limit = max(left, 0)
			quota = true
		}
	}
	// Refused before spooling: a body that says it is too large, or a
	// repository with no room left. What is read is the command list.
	if r.ContentLength > limit || limit == 0 {
		body, err := newCappedBody(r, peekCommands)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return nil, pushCommands{}, 0, false
		}
		msg := tooLarge
		if quota {
			this := "this push"
			if r.ContentLength > 0 {
				this += " of " + size(r.ContentLength)
			}
			msg = s.quotaMessage(repo, used, this)
		}
		s.log.Warn("git: push refused before its body", "repo", repo.FullName(), "user", user,
			"content_length", r.ContentLength, "limit", limit)
		refusePush(w, readPushCommands(bufio.NewReader(body)), msg)
		return nil, pushCommands{}, 0, false
	}
	body, err := newCappedBody(r, limit)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, pushCommands{}, 0, false
	}
	_ = os.MkdirAll(s.tmpDir, 0o700) // with replicas, another's sweeper may have taken it for a dead one's
	tmp, err := os.CreateTemp(s.tmpDir, "push-*")
	if err != nil {
		s.log.Error("git: spool push", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return nil, pushCommands{}, 0, false
	}
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	f = tmp
	// The command list goes to the spool as it is read; then the rest.
	br := bufio.NewReader(io.TeeReader(body, f))
	cmds = readPushCommands(br)
	if !cmds.valid && !body.over() {
		s.log.Info("git: not a push", "repo", repo.FullName(), "user", user)
		w.Header().Set("Connection", "close")
		http.Error(w, "not a git push: the body opens with no command list", http.StatusBadRequest)
		return nil, pushCommands{}, 0, false
	}
	_, err = io.Copy(f, body)
	// n is what the spool holds: the command list and the rest.
	if st, serr := f.Stat(); serr == nil {
		n = st.Size()
	}
	switch {
	case body.over():
		s.log.Warn("git: push cut at its cap", "repo", repo.FullName(), "user", user, "limit", limit)
		msg := tooLarge
		if quota {
			msg = s.quotaMessage(repo, used, "this push, larger than the "+size(limit)+" left,")
		}
		refusePush(w, cmds, msg)
		return nil, pushCommands{}, 0, false
	case err != nil:
		s.log.Info("git: push body not received", "repo", repo.FullName(), "user", user, "bytes", n, "err", err)
		status := http.StatusBadRequest
		if errors.Is(err, errBodyTooSlow) {
			status = http.StatusRequestTimeout
		}
		http.Error(w, "read request body: "+err.Error(), status)
		return nil, pushCommands{}, 0, false
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		s.log.Error("git: rewind spooled push", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return nil, pushCommands{}, 0, false
	}

	return f, cmds, n, true
}

// quotaMessage says why push (e.g. "this push of 3 MiB") does not fit
// repo's quota when used bytes are taken.
func (s *Server) quotaMessage(repo store.Repo, used int64, push string) string {
	return fmt.Sprintf("push refused: repository %s takes %s of its %s quota (knotless-server --repo-quota) "+
		"and %s does not fit; push smaller commits, or ask the server's operator to raise the quota",
		repo.FullName(), size(used), size(s.cfg.RepoQuota), push)
}

// dirSize is the disk space the files under dir take, as du counts it.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			} else {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// repoLocks holds one mutex per repository, made when first wanted and
// dropped when nobody holds or waits for it. The zero value is ready.
type repoLocks struct {
	mu sync.Mutex
	m  map[int64]*repoLock
}

type repoLock struct {
	sync.Mutex
	users int // holders and waiters
}

// lock takes repository id's lock and returns its release.
func (l *repoLocks) lock(id int64) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[int64]*repoLock{}
	}
	e := l.m[id]
	if e == nil {
		e = &repoLock{}
		l.m[id] = e
	}
	e.users++
	l.mu.Unlock()
	e.Lock()
	return func() {
		e.Unlock()
		l.mu.Lock()
		if e.users--; e.users == 0 {
			delete(l.m, id)
		}
		l.mu.Unlock()
	}
}
