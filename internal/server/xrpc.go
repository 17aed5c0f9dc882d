package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/bluesky-social/indigo/atproto/atcrypto"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/metrics"
	"knotless.dev/knotless/internal/oidc"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/svcauth"
	"knotless.dev/knotless/internal/version"
)

// Token prefixes: account API tokens and run tokens (git fetch of one run).
const (
	accountTokenPrefix = "knl_"
	runTokenPrefix     = "knr_"
)

// maxJSONBody caps a procedure's JSON input.
const maxJSONBody = 1 << 20

// authKind says who may call a method.
type authKind int

const (
	authNone     authKind = iota
	authUser              // account API token
	authRunner            // service-auth JWT of an approved runner, and its open session (api.SessionHeader)
	authSession           // service-auth JWT of an approved runner, no session needed (startSession)
	authRegister          // service-auth JWT of the key being registered
)

// method is one XRPC method: its HTTP verb, its caller and its handler.
// Exactly one handler field is set, matching auth.
type method struct {
	verb   string
	auth   authKind
	public func(w http.ResponseWriter, r *http.Request) error
	user   func(w http.ResponseWriter, r *http.Request, a store.Account) error
	runner func(w http.ResponseWriter, r *http.Request, x store.Runner) error
}

func (s *Server) methods() map[string]method {
	q, p := http.MethodGet, http.MethodPost
	user := func(verb string, f func(http.ResponseWriter, *http.Request, store.Account) error) method {
		return method{verb: verb, auth: authUser, user: f}
	}
	runner := func(f func(http.ResponseWriter, *http.Request, store.Runner) error) method {
		return method{verb: p, auth: authRunner, runner: f}
	}
	session := func(f func(http.ResponseWriter, *http.Request, store.Runner) error) method {
		return method{verb: p, auth: authSession, runner: f}
	}
	return map[string]method{
		api.MethodDescribeServer:          {verb: q, auth: authNone, public: s.describe},
		api.MethodWhoAmI:                  user(q, s.whoami),
		api.MethodCreateAccount:           user(p, s.createAccount),
		api.MethodDisableAccount:          user(p, s.disableAccount),
		api.MethodEnableAccount:           user(p, s.enableAccount),
		api.MethodCreateToken:             user(p, s.createToken),
		api.MethodListTokens:              user(q, s.listTokens),
		api.MethodRevokeToken:             user(p, s.revokeToken),
		api.MethodCreateRepo:              user(p, s.createRepo),
		api.MethodListRepos:               user(q, s.listRepos),
		api.MethodListRuns:                user(q, s.listRuns),
		api.MethodGetRun:                  user(q, s.getRun),
		api.MethodGetRunLog:               user(q, s.unlessExpired(s.logsExpired, s.getLog)),
		api.MethodListOutputs:             user(q, s.unlessExpired(s.outputsExpired, s.listOutputs)),
		api.MethodGetOutputs:              user(q, s.unlessExpired(s.outputsExpired, s.getOutputs)),
		api.MethodCancelRun:               user(p, s.cancelRun),
		api.MethodTriggerRun:              user(p, s.triggerRun),
		api.MethodRerun:                   user(p, s.rerun),
		api.MethodSetSecret:               user(p, s.setSecret),
		api.MethodListSecrets:             user(q, s.listSecrets),
		api.MethodDeleteSecret:            user(p, s.deleteSecret),
		api.MethodRegisterRunner:          {verb: p, auth: authRegister, public: s.registerRunner},
		api.MethodListRunners:             user(q, s.listRunners),
		api.MethodApproveRunner:           user(p, s.approveRunner),
		api.MethodRemoveRunner:            user(p, s.removeRunner),
		api.MethodClaim:                   runner(s.claim),
		api.MethodHeartbeat:               runner(s.heartbeat),
		api.MethodUpdateStep:              runner(s.updateStep),
		api.MethodAppendLog:               runner(s.appendLog),
		api.MethodUploadOutputs:           runner(s.uploadOutputs),
		api.MethodComplete:                runner(s.complete),
		api.MethodStartSession:            session(s.startSession),
		api.MethodHandover:                runner(s.handover),
		api.MethodResumeRun:               runner(s.resumeRun),
		api.MethodGetNeedOutputs:          runner(s.getNeedOutputs),
		api.MethodEnvironmentsRemoved:     runner(s.environmentsRemoved),
		api.MethodIDTokens:                runner(s.idTokens),
		api.MethodCreateRegistrationToken: user(p, s.createRegistrationToken),
		api.MethodRepoUsage:               user(q, s.repoUsage),
		api.MethodSetRetention:            user(p, s.setRetention),
		api.MethodListSchedules:           user(q, s.listSchedules),
		api.MethodPauseSchedule:           user(p, s.pauseSchedule),
	}
}

func (s *Server) routes() http.Handler {
	table := s.methods()
	mux := http.NewServeMux()
	mux.HandleFunc("/xrpc/{nsid}", func(w http.ResponseWriter, r *http.Request) {
		s.serveXRPC(w, r, table)
	})
	mux.HandleFunc(DownloadPath, s.serveDownload)
	mux.HandleFunc("GET "+HealthzPath, s.healthz)
	mux.HandleFunc("GET "+ReadyzPath, s.readyz)
	mux.Handle("GET "+MetricsPath, metrics.Handler(s.metrics.reg))
	mux.HandleFunc("GET "+oidc.DiscoveryPath, s.issuer.ServeConfiguration)
	mux.HandleFunc("GET "+oidc.JWKSPath, s.issuer.ServeJWKS(s.log))
	mux.HandleFunc("/", s.serveRoot)
	return mux
}

func (s *Server) serveRoot(w http.ResponseWriter, r *http.Request) {
	if owner, name, rest, ok := gitPath(r.URL.Path); ok {
		s.serveGit(w, r, owner, name, rest)
		return
	}
	if strings.Contains(r.URL.Path, ".git/") {
		// Dumb HTTP would hand out any object file, reachable or not.
		w.Header().Set("Connection", "close") // the body is not read
		http.Error(w, "not a smart HTTP git request: this server serves /OWNER/NAME.git/ followed by info/refs, git-upload-pack or git-receive-pack only (git 1.6.6 or later)",
			http.StatusNotFound)
		return
	}
	s.web.ServeHTTP(w, r) // the pages: internal/web
}

func (s *Server) serveXRPC(w http.ResponseWriter, r *http.Request, table map[string]method) {
	nsid := r.PathValue("nsid")
	m, ok := table[nsid]
	if !ok {
		writeError(w, xerr(http.StatusNotImplemented, api.ErrNotImplemented, "method %q is not served here", nsid))
		return
	}
	if r.Method != m.verb && !(m.verb == http.MethodGet && r.Method == http.MethodHead) {
		kind := "a query; use GET"
		if m.verb == http.MethodPost {
			kind = "a procedure; use POST"
		}
		w.Header().Set("Allow", m.verb)
		writeError(w, xerr(http.StatusMethodNotAllowed, api.ErrInvalidRequest, "%s is %s", nsid, kind))
		return
	}
	var err error
	switch m.auth {
	case authNone, authRegister:
		err = m.public(w, r)
	case authUser:
		var a store.Account
		if a, err = s.authUser(r); err == nil {
			err = m.user(w, r, a)
		}
	case authRunner, authSession:
		var x store.Runner
		if x, err = s.authRunner(r, nsid, m.auth == authRunner); err == nil {
			err = m.runner(w, r, x)
		}
	}
	if err != nil {
		s.writeErr(w, r, nsid, err)
	}
}

// xerr makes an XRPC error answer.
func xerr(status int, name, format string, args ...any) *api.Error {
	return &api.Error{Status: status, Name: name, Message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *api.Error {
	return xerr(http.StatusBadRequest, api.ErrInvalidRequest, format, args...)
}

func forbidden(format string, args ...any) *api.Error {
	return xerr(http.StatusForbidden, api.ErrForbidden, format, args...)
}

// writeErr answers err: an *api.Error as is, store errors by kind, anything
// else as a 500 whose details go only to the log.
func (s *Server) writeErr(w http.ResponseWriter, r *http.Request, nsid string, err error) {
	var e *api.Error
	switch {
	case errors.As(err, &e):
	// Handlers say what is missing or taken in their own words; these are
	// for races they did not foresee (e.g. a runner removed meanwhile).
	case errors.Is(err, store.ErrNotFound):
		e = xerr(http.StatusNotFound, api.ErrNotFound, "%s", storeMessage(err, store.ErrNotFound)+" does not exist (any more)")
	case errors.Is(err, store.ErrRunFinished):
		e = xerr(http.StatusConflict, api.ErrRunFinished, "%s", storeMessage(err, store.ErrRunFinished))
	case errors.Is(err, store.ErrConflict):
		e = xerr(http.StatusConflict, api.ErrConflict, "%s: try again", storeMessage(err, store.ErrConflict))
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		return // the client went away
	case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil,
		errors.Is(err, store.ErrBusy):
		// The server's own bound on a database call ran out, or a
		// transaction kept colliding with others through its retries:
		// overload, which a retry after a wait gets through, not a fault.
		s.log.Warn("the server is busy: a request's database call timed out or kept colliding", "method", nsid, "err", err)
		why := "its database did not answer in time"
		if errors.Is(err, store.ErrBusy) {
			why = "its database's writes kept colliding"
		}
		e = xerr(http.StatusServiceUnavailable, api.ErrServerBusy, "the server is busy (%s); retry in %d s", why, RetryAfterBusy)
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterBusy))
	default:
		s.log.Error("request failed", "method", nsid, "err", err)
		e = xerr(http.StatusInternalServerError, api.ErrInternal, "internal error; see the server log")
	}
	s.metrics.apiErrors.WithLabelValues(metrics.Code(e.Status)).Inc()
	writeError(w, e)
}

// RetryAfterBusy is the Retry-After, in seconds, of an api.ErrServerBusy
// answer.
const RetryAfterBusy = 5

// storeMessage is a store error's text without the sentinel the store
// wrapped at its end ("run 5: not found" → "run 5"), so that the answer
// does not end in a generic word.
func storeMessage(err, sentinel error) string {
	return strings.TrimSuffix(err.Error(), ": "+sentinel.Error())
}

func writeError(w http.ResponseWriter, e *api.Error) {
	status := e.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="knotless"`)
	}
	writeJSONStatus(w, status, e)
}

func writeJSON(w http.ResponseWriter, v any) error {
	writeJSONStatus(w, http.StatusOK, v)
	return nil
}

func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"InternalServerError","message":"encode answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// empty is the answer of procedures without output.
var empty = struct{}{}

// decodeInput reads a procedure's JSON body into v. An empty body leaves v
// as it is; handlers check the fields they need.
func decodeInput(r *http.Request, v any) error {
	return decodeInputLimit(r, v, maxJSONBody)
}

// decodeInputLimit is decodeInput for a body of at most limit bytes.
func decodeInputLimit(r *http.Request, v any, limit int64) error {
	if r.ContentLength > limit {
		return xerr(http.StatusRequestEntityTooLarge, api.ErrInvalidRequest, "body larger than %d bytes", limit)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return bodyError(err)
	}
	if int64(len(body)) > limit {
		return xerr(http.StatusRequestEntityTooLarge, api.ErrInvalidRequest, "body larger than %d bytes", limit)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil // no body: every field takes its zero value
	}
	if err := json.Unmarshal(body, v); err != nil {
		return badRequest("invalid JSON body: %v", err)
	}
	return nil
}

// bodyError is the answer to a request whose body could not be read: 408
// for one too slow (see Limits), else 400.
func bodyError(err error) error {
	if errors.Is(err, errBodyTooSlow) {
		return xerr(http.StatusRequestTimeout, api.ErrInvalidRequest, "read body: %v", err)
	}
	return badRequest("read body: %v", err)
}

// intParam reads an integer query parameter; def when absent.
func intParam(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, badRequest("parameter %s: %q is not an integer", name, v)
	}
	return n, nil
}

// requiredInt reads a required positive integer query parameter.
func requiredInt(r *http.Request, name string) (int64, error) {
	if r.URL.Query().Get(name) == "" {
		return 0, badRequest("parameter %s is required", name)
	}
	n, err := intParam(r, name, 0)
	if err == nil && n <= 0 {
		err = badRequest("parameter %s must be positive", name)
	}
	return n, err
}

// bearer returns the token of an "Authorization: Bearer X" header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// isJWT reports whether a bearer token has the three parts of a JWT.
func isJWT(tok string) bool { return strings.Count(tok, ".") == 2 }

func (s *Server) authUser(r *http.Request) (store.Account, error) {
	tok, ok := bearer(r)
	if !ok {
		return store.Account{}, xerr(http.StatusUnauthorized, api.ErrAuthRequired,
			"an account API token is required (Authorization: Bearer TOKEN)")
	}
	if isJWT(tok) {
		return store.Account{}, xerr(http.StatusUnauthorized, api.ErrInvalidToken,
			"this method takes an account API token, not a runner token")
	}
	return s.accountByTokenHash(r.Context(), hashToken(tok))
}

// accountByTokenHash is the account of an API token (by its hash), with
// the answers authUser gives for an unknown, revoked or expired token and
// a disabled account; a web session (web.go) is checked by it too.
func (s *Server) accountByTokenHash(ctx context.Context, hash string) (store.Account, error) {
	a, err := s.store.AccountByToken(ctx, hash, s.now())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return a, xerr(http.StatusUnauthorized, api.ErrInvalidToken,
			"unknown API token: no account on this server has it (it may have been revoked: knotless token list shows yours)")
	case errors.Is(err, store.ErrTokenExpired):
		return a, xerr(http.StatusUnauthorized, api.ErrExpiredToken,
			"API %s: log in with another token of the account (knotless token create makes one)", storeMessage(err, store.ErrTokenExpired))
	case errors.Is(err, store.ErrAccountDisabled):
		return a, xerr(http.StatusUnauthorized, api.ErrAccountDisabled,
			"%s is disabled by an admin of this server: its tokens are refused until an admin enables it (knotless account enable)",
			storeMessage(err, store.ErrAccountDisabled))
	}
	return a, err
}

// authRunner verifies a runner's service-auth JWT for nsid against the key
// it registered, refuses runners not yet approved and, with needSession,
// calls without the runner's open session (see checkSession).
func (s *Server) authRunner(r *http.Request, nsid string, needSession bool) (store.Runner, error) {
	tok, ok := bearer(r)
	if !ok {
		return store.Runner{}, xerr(http.StatusUnauthorized, api.ErrAuthRequired,
			"a runner service-auth token is required (Authorization: Bearer JWT)")
	}
	if !isJWT(tok) {
		return store.Runner{}, xerr(http.StatusUnauthorized, api.ErrInvalidToken,
			"runner methods take a service-auth JWT signed by the runner's key")
	}
	var found store.Runner
	lookup := func(ctx context.Context, did string) (atcrypto.PublicKey, error) {
		x, err := s.store.RunnerByDID(ctx, did)
		if err != nil {
			return nil, err
		}
		found = x
		return parsePublicKey(x.PublicKey)
	}
	claims, err := s.checkToken(r.Context(), tok, nsid, lookup)
	if err != nil {
		return store.Runner{}, err
	}
	if found.Status != api.RunnerApproved {
		return found, xerr(http.StatusForbidden, api.ErrNotApproved,
			"runner %s of %s is not approved yet; the owner approves it with: knotless runner approve --repo %s %s",
			found.Name, found.Repo, found.Repo, found.Name)
	}
	// Only approved runners' tokens take room in the replay cache.
	if err := s.consumeToken(claims, s.replay.runners, "runner "+found.Name); err != nil {
		return found, err
	}
	if needSession {
		if err := checkSession(found, r.Header.Get(api.SessionHeader)); err != nil {
			return found, err
		}
	}
	s.touchRunner(r.Context(), found.ID)
	return found, nil
}

// verify checks a registration's JWT and records its jti (in the cache of
// registrations, apart from the runners'): checkToken, then consumeToken.
func (s *Server) verify(ctx context.Context, tok, nsid string, keys svcauth.KeyLookup) (string, error) {
	c, err := s.checkToken(ctx, tok, nsid, keys)
	if err != nil {
		return "", err
	}
	if err := s.consumeToken(c, s.replay.registrations, "registering key"); err != nil {
		return "", err
	}
	return c.Issuer, nil
}

// checkToken checks a runner JWT, all but its replay, and maps failures to
// XRPC errors: ExpiredToken for an expired one, InvalidToken for anything
// else.
func (s *Server) checkToken(ctx context.Context, tok, nsid string, keys svcauth.KeyLookup) (svcauth.Claims, error) {
	v := &svcauth.Verifier{Audience: s.did, Keys: keys}
	c, err := v.Check(ctx, tok, nsid)
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, svcauth.ErrExpired):
		return c, xerr(http.StatusUnauthorized, api.ErrExpiredToken, "runner token expired; check the runner's clock")
	case errors.Is(err, svcauth.ErrWrongMethod):
		return c, xerr(http.StatusUnauthorized, api.ErrInvalidToken, "runner token was issued for another method")
	case errors.Is(err, svcauth.ErrTooLong):
		return c, xerr(http.StatusUnauthorized, api.ErrInvalidToken, "runner token lives longer than %s", svcauth.MaxTTL)
	default:
		return c, xerr(http.StatusUnauthorized, api.ErrInvalidToken,
			"runner token invalid (unknown runner, wrong audience, bad signature, or a jti over %d bytes)", svcauth.MaxJTIBytes)
	}
}

// consumeToken records a checked token's jti in cache: a replayed token is
// refused, and so is a new one when the cache may hold no more (who names
// the issuer for the message).
func (s *Server) consumeToken(c svcauth.Claims, cache svcauth.ReplayCache, who string) error {
	v := &svcauth.Verifier{Replay: cache}
	err := v.Consume(c)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, svcauth.ErrReplayed):
		return xerr(http.StatusUnauthorized, api.ErrInvalidToken, "runner token was already used")
	case errors.Is(err, svcauth.ErrIssuerFull):
		return xerr(http.StatusTooManyRequests, api.ErrTooManyTokens,
			"%s sent more than %d requests within its tokens' lifetime (the server's --replay-per-runner): slow down; each token is remembered until it expires (at most %s)",
			who, s.cfg.ReplayPerRunner, svcauth.MaxTTL)
	case errors.Is(err, svcauth.ErrReplayFull):
		return xerr(http.StatusServiceUnavailable, api.ErrTooManyTokens,
			"the server remembers as many unexpired runner tokens as it may (--replay-cache-size, --replay-registrations) and accepts new ones as old ones expire: retry in a minute")
	}
	return err
}

// newToken returns prefix + 32 random bytes in unpadded base64url.
func newToken(prefix string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make token: %w", err)
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// hashToken is how tokens are stored: SHA-256, hex.
func hashToken(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

func (s *Server) describe(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, api.DescribeServerOutput{DID: s.did, Version: version.Version})
}
