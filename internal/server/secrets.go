package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// maxSecretSize caps a secret value.
const maxSecretSize = 64 << 10

// secretAAD binds a ciphertext to its repository, name and runner scope, so
// a ciphertext copied to another row does not decrypt.
func secretAAD(repoID int64, name, runner string) []byte {
	return fmt.Appendf(nil, "knotless-secret\x00%d\x00%s\x00%s", repoID, name, runner)
}

// seal encrypts a secret value: nonce || AES-256-GCM(value).
func (s *Server) seal(repoID int64, name, runner string, value []byte) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("make nonce: %w", err)
	}
	return s.aead.Seal(nonce, nonce, value, secretAAD(repoID, name, runner)), nil
}

// unseal decrypts what seal made.
func (s *Server) unseal(sec store.Secret) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sec.Ciphertext) < n {
		return nil, fmt.Errorf("secret %s: ciphertext too short", sec.Name)
	}
	v, err := s.aead.Open(nil, sec.Ciphertext[:n], sec.Ciphertext[n:], secretAAD(sec.RepoID, sec.Name, sec.Runner))
	if err != nil {
		return nil, fmt.Errorf("decrypt secret %s (was %s replaced?): %w", sec.Name, SecretKeyFile, err)
	}
	return v, nil
}

// runSecrets returns the values runner x receives for run: only names the
// workflow lists at its top level; a value scoped to x's name wins over an
// unscoped one; values scoped to other runners are never included.
func (s *Server) runSecrets(ctx context.Context, run store.Run, x store.Runner) (map[string][]byte, error) {
	if len(run.Secrets) == 0 {
		return nil, nil
	}
	rows, err := s.store.SecretsFor(ctx, run.RepoID, run.Secrets)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	scoped := map[string]bool{}
	for _, sec := range rows {
		if sec.RepoID != run.RepoID || (sec.Runner != "" && sec.Runner != x.Name) {
			continue
		}
		if sec.Runner == "" && scoped[sec.Name] {
			continue
		}
		v, err := s.unseal(sec)
		if err != nil {
			return nil, err
		}
		out[sec.Name] = v
		if sec.Runner != "" {
			scoped[sec.Name] = true
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

func validSecretScope(name, runner string) error {
	if !secretRE.MatchString(name) {
		return badRequest("secret name %q: use letters, digits and '_', not starting with a digit (at most 128)", name)
	}
	if runner != "" && !runnerRE.MatchString(runner) {
		return badRequest("runner name %q: use 1-63 characters of A-Z, a-z, 0-9, '.', '_' and '-'", runner)
	}
	return nil
}

func (s *Server) setSecret(w http.ResponseWriter, r *http.Request, a store.Account) error {
	var in api.SetSecretInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	if err := validSecretScope(in.Name, in.Runner); err != nil {
		return err
	}
	value, err := in.Bytes()
	if err != nil {
		return badRequest("%v", err)
	}
	if len(value) == 0 {
		return badRequest("secret %s: the value is empty", in.Name)
	}
	if len(value) > maxSecretSize {
		return badRequest("secret %s: the value is larger than %d bytes", in.Name, maxSecretSize)
	}
	if err := api.CheckSecretValue(in.Name, value); err != nil {
		return badRequest("%v", err)
	}
	repo, err := s.managedRepo(r.Context(), a, in.Repo)
	if err != nil {
		return err
	}
	// A typo'd runner name would leave the real runner with the unscoped
	// value: scope only to a runner registered here (pending or approved).
	if in.Runner != "" {
		if _, err := s.store.RunnerByName(r.Context(), repo.ID, in.Runner); errors.Is(err, store.ErrNotFound) {
			return xerr(http.StatusNotFound, api.ErrNotFound, "no runner %s registered for %s (knotless runner list --repo %s)",
				in.Runner, repo.FullName(), repo.FullName())
		} else if err != nil {
			return err
		}
	}
	ct, err := s.seal(repo.ID, in.Name, in.Runner, value)
	if err != nil {
		return err
	}
	if err := s.store.SetSecret(r.Context(), store.Secret{RepoID: repo.ID, Name: in.Name, Runner: in.Runner,
		Ciphertext: ct, UpdatedAt: s.now()}); err != nil {
		return err
	}
	s.log.Info("secret set", "repo", repo.FullName(), "name", in.Name, "runner", in.Runner, "by", a.Handle)
	return writeJSON(w, empty)
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request, a store.Account) error {
	repo, err := s.managedRepo(r.Context(), a, r.URL.Query().Get("repo"))
	if err != nil {
		return err
	}
	rows, err := s.store.ListSecrets(r.Context(), repo.ID)
	if err != nil {
		return err
	}
	out := api.ListSecretsOutput{Secrets: []api.Secret{}}
	for _, sec := range rows {
		out.Secrets = append(out.Secrets, api.Secret{Name: sec.Name, Runner: sec.Runner, UpdatedAt: sec.UpdatedAt})
	}
	return writeJSON(w, out)
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request, a store.Account) error {
	var in api.DeleteSecretInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	if err := validSecretScope(in.Name, in.Runner); err != nil {
		return err
	}
	repo, err := s.managedRepo(r.Context(), a, in.Repo)
	if err != nil {
		return err
	}
	err = s.store.DeleteSecret(r.Context(), repo.ID, in.Name, in.Runner)
	if errors.Is(err, store.ErrNotFound) {
		scope := ""
		if in.Runner != "" {
			scope = " for runner " + in.Runner
		}
		return xerr(http.StatusNotFound, api.ErrNotFound, "no secret %s%s in %s (knotless secret list --repo %s)",
			in.Name, scope, repo.FullName(), repo.FullName())
	}
	if err != nil {
		return err
	}
	s.log.Info("secret deleted", "repo", repo.FullName(), "name", in.Name, "runner", in.Runner, "by", a.Handle)
	return writeJSON(w, empty)
}
