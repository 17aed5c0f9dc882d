package server

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

var (
	// runner names and labels
	runnerRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,63}$`)
	secretRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// validHandle and validRepoName apply api.CheckHandle and api.CheckName,
// the one rule for names that become directories.
func validHandle(h string) error {
	if err := api.CheckHandle(h); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

func validRepoName(n string) error {
	if err := api.CheckName("repository name", n); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

func (s *Server) whoami(w http.ResponseWriter, r *http.Request, a store.Account) error {
	return writeJSON(w, apiAccount(a))
}

func apiAccount(a store.Account) api.Account {
	return api.Account{Handle: a.Handle, DID: a.DID, Admin: a.Admin, Disabled: a.Disabled}
}

func (s *Server) createAccount(w http.ResponseWriter, r *http.Request, caller store.Account) error {
	var in api.CreateAccountInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	if !caller.Admin {
		h := in.Handle
		if validHandle(h) != nil {
			h = "HANDLE"
		}
		return forbidden("only admins create accounts: ask an admin of this server to run knotless account create %s", h)
	}
	if err := validHandle(in.Handle); err != nil {
		return err
	}
	if in.Handle == api.ScheduleActor {
		return badRequest("handle %q is reserved: it is the actor of the runs schedules start (on.schedule); choose another", in.Handle)
	}
	did := in.DID
	if did == "" {
		var err error
		if did, err = freshDID(); err != nil {
			return err
		}
	} else if _, err := syntax.ParseDID(did); err != nil {
		return badRequest("did %q is not a DID: %v", did, err)
	}
	token, err := newToken(accountTokenPrefix)
	if err != nil {
		return err
	}
	a, err := s.store.CreateAccount(r.Context(), store.Account{Handle: in.Handle, DID: did, Admin: in.Admin, CreatedAt: s.now()},
		hashToken(token))
	if errors.Is(err, store.ErrConflict) {
		if _, herr := s.store.AccountByHandle(r.Context(), in.Handle); herr == nil {
			return xerr(http.StatusConflict, api.ErrConflict, "handle %s is taken: choose another handle", in.Handle)
		}
		return xerr(http.StatusConflict, api.ErrConflict, "DID %s belongs to another account already: each account needs its own DID", did)
	}
	if err != nil {
		return err
	}
	s.log.Info("account created", "handle", a.Handle, "did", a.DID, "admin", a.Admin, "by", caller.Handle)
	return writeJSON(w, api.CreateAccountOutput{Account: apiAccount(a), Token: token})
}

func (s *Server) apiRepo(r store.Repo) api.Repo {
	return api.Repo{Owner: r.Owner, Name: r.Name, CloneURL: s.cfg.URL + "/" + r.Owner + "/" + r.Name + ".git", CreatedAt: r.CreatedAt}
}

func (s *Server) createRepo(w http.ResponseWriter, r *http.Request, caller store.Account) error {
	var in api.CreateRepoInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	ownerHandle, name := caller.Handle, in.Repo
	if o, n, ok := strings.Cut(in.Repo, "/"); ok {
		ownerHandle, name = o, n
	}
	if err := validRepoName(name); err != nil {
		return err
	}
	if err := validHandle(ownerHandle); err != nil {
		return err
	}
	owner := caller
	if ownerHandle != caller.Handle {
		if !caller.Admin {
			return forbidden("you may create repositories only under your own handle: name it %s or %s/%s", name, caller.Handle, name)
		}
		var err error
		owner, err = s.store.AccountByHandle(r.Context(), ownerHandle)
		if errors.Is(err, store.ErrNotFound) {
			return xerr(http.StatusNotFound, api.ErrNotFound, "no account %s: create it first (knotless account create %s)", ownerHandle, ownerHandle)
		}
		if err != nil {
			return err
		}
	}
	if err := s.initBare(r.Context(), owner.Handle, name); err != nil {
		return err
	}
	repo, err := s.store.CreateRepo(r.Context(), owner.ID, name, s.now())
	if errors.Is(err, store.ErrConflict) {
		return xerr(http.StatusConflict, api.ErrConflict, "repository %s/%s exists already: choose another name, or push to it", owner.Handle, name)
	}
	if err != nil {
		return err
	}
	s.log.Info("repository created", "repo", repo.FullName(), "by", caller.Handle)
	return writeJSON(w, s.apiRepo(repo))
}

func (s *Server) listRepos(w http.ResponseWriter, r *http.Request, caller store.Account) error {
	owner := caller.ID
	if caller.Admin {
		owner = 0
	}
	repos, err := s.store.ListRepos(r.Context(), owner)
	if err != nil {
		return err
	}
	out := api.ListReposOutput{Repos: []api.Repo{}}
	for _, repo := range repos {
		out.Repos = append(out.Repos, s.apiRepo(repo))
	}
	return writeJSON(w, out)
}

// repoByFullName resolves "OWNER/NAME" (404 when absent).
func (s *Server) repoByFullName(ctx context.Context, full string) (store.Repo, error) {
	if err := api.CheckRepo(full); err != nil {
		return store.Repo{}, badRequest("%v", err)
	}
	owner, name, _ := strings.Cut(full, "/")
	repo, err := s.store.RepoByName(ctx, owner, name)
	if errors.Is(err, store.ErrNotFound) {
		return repo, xerr(http.StatusNotFound, api.ErrNotFound, "no repository %s (knotless repo list shows yours)", full)
	}
	return repo, err
}

// canManage reports whether a may manage repo: its owner or an admin.
func canManage(a store.Account, repo store.Repo) bool { return a.Admin || a.ID == repo.OwnerID }

// managedRepo resolves "OWNER/NAME" and checks the caller owns it or is an
// admin. A repository the caller may not manage is answered 404 NotFound,
// exactly as one that does not exist.
func (s *Server) managedRepo(ctx context.Context, a store.Account, full string) (store.Repo, error) {
	repo, err := s.repoByFullName(ctx, full)
	if err != nil {
		return repo, err
	}
	if !canManage(a, repo) {
		// The same answer as for a repository that does not exist, so
		// that other accounts cannot learn which names are taken.
		return repo, xerr(http.StatusNotFound, api.ErrNotFound, "no repository %s (knotless repo list shows yours)", full)
	}
	return repo, nil
}
