package main

import (
	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/server"
)

// clientLimitFlags adds the flags of server.ClientLimits to f and returns
// their names (each also read from KNOTLESS_<NAME>).
func clientLimitFlags(f *pflag.FlagSet, l *server.ClientLimits) []string {
	f.IntVar(&l.MaxRunnerLabels, "max-runner-labels", server.DefaultMaxRunnerLabels,
		"most labels one runner registers with")
	f.IntVar(&l.MaxPendingRunners, "max-pending-runners", server.DefaultMaxPendingRunners,
		"most runners of one repository awaiting approval; further registrations are refused until an owner approves or removes some")
	f.IntVar(&l.MaxListPage, "max-list-page", server.DefaultMaxListPage,
		"most runs or runners one page of run.list or runner.list holds (clients read further pages by cursor)")
	f.IntVar(&l.MaxClaimsPerRunner, "max-claims-per-runner", server.DefaultMaxClaimsPerRunner,
		"most claims (long polls) one runner identity has open at once; more are refused at once")
	f.IntVar(&l.ReplayCacheSize, "replay-cache-size", server.DefaultReplayCacheSize,
		"most unexpired runner tokens remembered against replay (~65 bytes each); when full, new tokens are refused until old ones expire")
	f.IntVar(&l.ReplayPerRunner, "replay-per-runner", server.DefaultReplayPerRunner,
		"most unexpired tokens remembered for one runner identity (a runner's requests within its tokens' lifetime, 60 s)")
	f.IntVar(&l.ReplayRegistration, "replay-registrations", server.DefaultReplayRegistration,
		"most unexpired runner registration tokens remembered (kept apart from approved runners' tokens)")
	f.IntVar(&l.MaxStepIndex, "max-step-index", server.DefaultMaxStepIndex,
		"highest step index a runner may report or send logs for")
	f.IntVar(&l.RegistrationsPerMinute, "max-registrations-per-minute", server.DefaultRegistrationsPerMinute,
		"most runner registrations one client address (an IPv6 /64) sends per minute, refused ones included; more get 429 with Retry-After")
	return []string{"max-registrations-per-minute", "max-runner-labels", "max-pending-runners", "max-list-page", "max-claims-per-runner",
		"replay-cache-size", "replay-per-runner", "replay-registrations", "max-step-index"}
}
