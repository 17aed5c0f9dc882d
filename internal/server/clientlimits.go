package server

import (
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/svcauth"
)

// Defaults of ClientLimits, printed by knotless-server --help.
const (
	DefaultMaxRunnerLabels        = 32
	DefaultMaxPendingRunners      = 100
	DefaultMaxListPage            = 1000
	DefaultMaxClaimsPerRunner     = 2
	DefaultReplayCacheSize        = 500_000
	DefaultReplayPerRunner        = 20_000
	DefaultReplayRegistration     = 10_000
	DefaultMaxStepIndex           = 10_000
	DefaultRegistrationsPerMinute = 10
)

// ClientLimits bound what one client can make the server hold: rows,
// waiting requests, remembered tokens. Every field has a knotless-server
// flag; zero fields take the defaults above. Past a limit the server
// refuses the request with an error that says which limit and what to do;
// it never forgets or drops what it already holds.
type ClientLimits struct {
	// MaxRunnerLabels caps the labels of one runner registration
	// (each is 1-63 characters).
	MaxRunnerLabels int
	// MaxPendingRunners caps the runners of one repository awaiting
	// approval: registering one more is refused (429) until an owner
	// approves or removes some.
	MaxPendingRunners int
	// MaxListPage caps the page size of dev.knotless.run.list and
	// dev.knotless.runner.list (their "limit"); further pages are read
	// with the answer's cursor.
	MaxListPage int
	// MaxClaimsPerRunner caps the claims (long polls) one runner identity
	// has open at once; one more is refused at once (429). A knotless-run
	// process has one open at a time; the second is slack for a restart.
	MaxClaimsPerRunner int
	// ReplayCacheSize caps the runner tokens (jti values) remembered
	// until they expire, so that none is accepted twice. When it is full,
	// new tokens are refused (503) until old ones expire: a used token is
	// never forgotten early.
	ReplayCacheSize int
	// ReplayPerRunner caps the tokens remembered for one runner identity
	// (and one registering key): one runner cannot fill the cache for the
	// others (429).
	ReplayPerRunner int
	// ReplayRegistration caps the tokens of runner registrations
	// (dev.knotless.runner.register) remembered, apart from the runners'
	// own: registrations, which anyone can send, cannot fill the cache of
	// approved runners.
	ReplayRegistration int
	// MaxStepIndex is the highest step index updateStep and appendLog
	// accept (0 is the setup log; workflows have at most a few thousand
	// steps).
	MaxStepIndex int
	// RegistrationsPerMinute caps the runner registrations one client
	// address (an IPv6 /64) sends per minute, refused ones (a missing or
	// wrong registration token) included; more are refused (429 with
	// Retry-After).
	RegistrationsPerMinute int
}

func (l *ClientLimits) fill() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxRunnerLabels, DefaultMaxRunnerLabels)
	def(&l.MaxPendingRunners, DefaultMaxPendingRunners)
	def(&l.MaxListPage, DefaultMaxListPage)
	def(&l.MaxClaimsPerRunner, DefaultMaxClaimsPerRunner)
	def(&l.ReplayCacheSize, DefaultReplayCacheSize)
	def(&l.ReplayPerRunner, DefaultReplayPerRunner)
	def(&l.ReplayRegistration, DefaultReplayRegistration)
	def(&l.MaxStepIndex, DefaultMaxStepIndex)
	def(&l.RegistrationsPerMinute, DefaultRegistrationsPerMinute)
}

// replayCaches remember the jti values of runner tokens (see
// svcauth.ReplayCache): registrations, which anyone can send, apart from
// the tokens of approved runners, so that they cannot fill the latter.
type replayCaches struct {
	runners       svcauth.ReplayCache
	registrations svcauth.ReplayCache
}

// newReplayCaches bounds each replica's memory by l (these limits are per
// replica) and records every jti in db too, which all replicas see and
// which survives a restart (replayCache).
func newReplayCaches(l ClientLimits, db store.Store) replayCaches {
	return replayCaches{
		runners:       replayCache{mem: svcauth.NewMemoryReplayCache(l.ReplayCacheSize, l.ReplayPerRunner), store: db},
		registrations: replayCache{mem: svcauth.NewMemoryReplayCache(l.ReplayRegistration, l.ReplayPerRunner), store: db},
	}
}
