package server

import (
	"errors"
	"net/http"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

func apiToken(t store.Token, current string) api.Token {
	return api.Token{Name: t.Name, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, LastUsedAt: t.LastUsedAt,
		Current: current != "" && t.Hash == current}
}

// currentTokenHash is the hash of the account token r was made with.
func currentTokenHash(r *http.Request) string {
	if tok, ok := bearer(r); ok {
		return hashToken(tok)
	}
	return ""
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request, caller store.Account) error {
	var in api.CreateTokenInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	if err := api.CheckName("token name", in.Name); err != nil {
		return badRequest("%v", err)
	}
	now := s.now()
	if in.ExpiresAt != nil && !in.ExpiresAt.After(now) {
		return badRequest("expiresAt %s is not in the future", in.ExpiresAt.UTC().Format(time.RFC3339))
	}
	secret, err := newToken(accountTokenPrefix)
	if err != nil {
		return err
	}
	t, err := s.store.CreateToken(r.Context(), store.Token{AccountID: caller.ID, Name: in.Name, Hash: hashToken(secret),
		CreatedAt: now, ExpiresAt: in.ExpiresAt}, api.MaxTokensPerAccount)
	switch {
	case errors.Is(err, store.ErrConflict):
		return xerr(http.StatusConflict, api.ErrConflict, "you have a token named %s already: choose another name, or revoke it first (knotless token revoke %s)", in.Name, in.Name)
	case errors.Is(err, store.ErrLimit):
		return xerr(http.StatusConflict, api.ErrConflict, "an account may have at most %d tokens: revoke some first (knotless token list)", api.MaxTokensPerAccount)
	case err != nil:
		return err
	}
	expires := "never"
	if t.ExpiresAt != nil {
		expires = t.ExpiresAt.Format(time.RFC3339)
	}
	s.log.Info("token created", "handle", caller.Handle, "token", t.Name, "expires", expires)
	return writeJSON(w, api.CreateTokenOutput{Token: apiToken(t, ""), Secret: secret})
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request, caller store.Account) error {
	ts, err := s.store.ListTokens(r.Context(), caller.ID)
	if err != nil {
		return err
	}
	cur := currentTokenHash(r)
	out := api.ListTokensOutput{Tokens: []api.Token{}}
	for _, t := range ts {
		out.Tokens = append(out.Tokens, apiToken(t, cur))
	}
	return writeJSON(w, out)
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request, caller store.Account) error {
	var in api.RevokeTokenInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	if in.Name == "" {
		return badRequest("name is required: the token's name (knotless token list shows them)")
	}
	err := s.store.DeleteToken(r.Context(), caller.ID, in.Name, true)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return xerr(http.StatusNotFound, api.ErrNotFound, "you have no token named %s (knotless token list shows yours)", in.Name)
	case errors.Is(err, store.ErrLimit):
		return xerr(http.StatusConflict, api.ErrConflict,
			"token %s is your account's last: create another first (knotless token create NAME), log in with it, then revoke this one", in.Name)
	case err != nil:
		return err
	}
	s.log.Info("token revoked", "handle", caller.Handle, "token", in.Name)
	return writeJSON(w, empty)
}

func (s *Server) disableAccount(w http.ResponseWriter, r *http.Request, caller store.Account) error {
	return s.setDisabled(w, r, caller, true)
}

func (s *Server) enableAccount(w http.ResponseWriter, r *http.Request, caller store.Account) error {
	return s.setDisabled(w, r, caller, false)
}

func (s *Server) setDisabled(w http.ResponseWriter, r *http.Request, caller store.Account, disabled bool) error {
	var in api.AccountRef
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	verb := "enable"
	if disabled {
		verb = "disable"
	}
	if !caller.Admin {
		return forbidden("only admins %s accounts", verb)
	}
	if err := validHandle(in.Handle); err != nil {
		return err
	}
	if disabled && in.Handle == caller.Handle {
		return forbidden("you cannot disable your own account: another admin may")
	}
	a, err := s.store.SetAccountDisabled(r.Context(), in.Handle, disabled)
	if errors.Is(err, store.ErrNotFound) {
		return xerr(http.StatusNotFound, api.ErrNotFound, "no account %s", in.Handle)
	}
	if err != nil {
		return err
	}
	s.log.Info("account "+verb+"d", "handle", a.Handle, "by", caller.Handle)
	return writeJSON(w, apiAccount(a))
}
