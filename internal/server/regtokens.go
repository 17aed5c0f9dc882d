package server

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// Registration tokens: an owner's consent that runners register for one
// repository (knotless runner token).
const (
	registrationTokenPrefix = "knreg_"
	defaultRegistrationTTL  = time.Hour
	maxRegistrationTTL      = 7 * 24 * time.Hour
	maxRegistrationUses     = 1000
	maxLiveRegistrations    = 1000 // unexpired tokens of one repository
)

func (s *Server) createRegistrationToken(w http.ResponseWriter, r *http.Request, a store.Account) error {
	var in api.CreateRegistrationTokenInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	repo, err := s.managedRepo(r.Context(), a, in.Repo)
	if err != nil {
		return err
	}
	ttl := defaultRegistrationTTL
	if in.ExpiresIn != 0 {
		if in.ExpiresIn < 0 || in.ExpiresIn > int64(maxRegistrationTTL/time.Second) {
			return badRequest("expiresIn %d s: want 1..%d (%s)", in.ExpiresIn, int64(maxRegistrationTTL/time.Second), maxRegistrationTTL)
		}
		ttl = time.Duration(in.ExpiresIn) * time.Second
	}
	uses := in.Uses
	if uses == 0 {
		uses = 1
	}
	if uses < 1 || uses > maxRegistrationUses {
		return badRequest("uses %d: want 1..%d", in.Uses, maxRegistrationUses)
	}
	tok, err := newToken(registrationTokenPrefix)
	if err != nil {
		return err
	}
	now := s.now()
	t := store.RegistrationToken{Hash: hashToken(tok), RepoID: repo.ID, CreatedBy: a.Handle, UsesLeft: uses,
		ExpiresAt: now.Add(ttl), CreatedAt: now}
	err = s.store.CreateRegistrationToken(r.Context(), t, maxLiveRegistrations)
	if errors.Is(err, store.ErrLimit) {
		return xerr(http.StatusTooManyRequests, api.ErrInvalidRequest,
			"%s has %d unexpired registration tokens: wait until some expire (at most %s)", repo.FullName(), maxLiveRegistrations, maxRegistrationTTL)
	}
	if err != nil {
		return err
	}
	s.log.Info("registration token created", "repo", repo.FullName(), "by", a.Handle, "uses", uses, "expires", t.ExpiresAt)
	return writeJSON(w, api.RegistrationToken{Token: tok, Repo: repo.FullName(), Uses: uses, ExpiresAt: t.ExpiresAt.UTC()})
}

// registrationRefused is the one answer to a registration without a valid
// credential for the repository it names, the same whether or not that
// repository exists.
func registrationRefused(status int, repo string) error {
	name := api.ErrForbidden
	if status == http.StatusUnauthorized {
		name = api.ErrAuthRequired
	}
	repo = cut(repo, maxEchoedName)
	return xerr(status, name,
		"registering a runner for %s needs a registration token from an owner of the repository (knotless runner token --repo %s), given to knotless-run login --token (or KNOTLESS_REGISTRATION_TOKEN); a missing, unknown, expired or used-up token, or one of another repository, is refused",
		repo, repo)
}

// registrationGrant checks the registration credential cred (the
// RegistrationTokenHeader) for repository full, and that did may register
// as runner name there. It returns the repository and, when a use of a
// registration token was taken, its hash (to give it back should the
// registration fail).
func (s *Server) registrationGrant(ctx context.Context, cred, full, did, name string) (store.Repo, string, error) {
	if cred == "" {
		return store.Repo{}, "", registrationRefused(http.StatusUnauthorized, full)
	}
	refused := registrationRefused(http.StatusForbidden, full)
	owner, repoName, _ := strings.Cut(full, "/")
	if strings.HasPrefix(cred, accountTokenPrefix) {
		a, err := s.store.AccountByToken(ctx, hashToken(cred), s.now())
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrTokenExpired) || errors.Is(err, store.ErrAccountDisabled) {
			return store.Repo{}, "", refused
		} else if err != nil {
			return store.Repo{}, "", err
		}
		repo, err := s.store.RepoByName(ctx, owner, repoName)
		if errors.Is(err, store.ErrNotFound) || (err == nil && !canManage(a, repo)) {
			return store.Repo{}, "", refused
		}
		return repo, "", err
	}
	if !strings.HasPrefix(cred, registrationTokenPrefix) {
		return store.Repo{}, "", refused
	}
	hash := hashToken(cred)
	now := s.now()
	t, err := s.store.RegistrationToken(ctx, hash, now)
	if errors.Is(err, store.ErrNotFound) {
		return store.Repo{}, "", refused
	} else if err != nil {
		return store.Repo{}, "", err
	}
	if t.Repo != full {
		return store.Repo{}, "", refused
	}
	repo, err := s.store.RepoByID(ctx, t.RepoID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Repo{}, "", refused
	} else if err != nil {
		return store.Repo{}, "", err
	}
	// The same key registering the same runner again (a retried login)
	// takes no further use.
	if x, err := s.store.RunnerByDID(ctx, did); err == nil && x.RepoID == repo.ID && x.Name == name {
		return repo, "", nil
	}
	err = s.store.UseRegistrationToken(ctx, hash, repo.ID, now)
	if errors.Is(err, store.ErrNotFound) {
		return store.Repo{}, "", refused
	} else if err != nil {
		return store.Repo{}, "", err
	}
	return repo, hash, nil
}

// allowRegistration counts one registration attempt of r's client address
// and refuses it (429, with Retry-After) past
// ClientLimits.RegistrationsPerMinute.
func (s *Server) allowRegistration(w http.ResponseWriter, r *http.Request) error {
	key := r.RemoteAddr
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		key = host
		if ip := net.ParseIP(host); ip != nil {
			key = clientKey(&net.TCPAddr{IP: ip})
		}
	}
	wait, ok := s.regRate.take(key, s.now())
	if ok {
		return nil
	}
	secs := int(math.Ceil(wait.Seconds()))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	return xerr(http.StatusTooManyRequests, api.ErrTooManyRegistrations,
		"this address sent more than %d runner registrations in a minute (the server's --max-registrations-per-minute): retry in %d s",
		s.cfg.RegistrationsPerMinute, secs)
}

// rateLimiter is a token bucket per key: burst n, refilled n per period.
type rateLimiter struct {
	mu      sync.Mutex
	n       float64
	period  time.Duration
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxBuckets bounds the addresses remembered; full buckets are forgotten
// first (forgetting one loses nothing).
const maxBuckets = 100_000

func newRateLimiter(n int, period time.Duration) *rateLimiter {
	return &rateLimiter{n: float64(n), period: period, buckets: map[string]*bucket{}}
}

// take takes one token of key's bucket; when there is none it returns how
// long until there is.
func (l *rateLimiter) take(key string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rate := l.n / l.period.Seconds() // tokens per second
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			for k, o := range l.buckets {
				if o.tokens+now.Sub(o.last).Seconds()*rate >= l.n {
					delete(l.buckets, k)
				}
			}
		}
		b = &bucket{tokens: l.n, last: now}
		l.buckets[key] = b
	}
	b.tokens = math.Min(l.n, b.tokens+now.Sub(b.last).Seconds()*rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / rate * float64(time.Second)), false
}
