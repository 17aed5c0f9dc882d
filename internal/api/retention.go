package api

import (
	"fmt"
	"time"
)

// Retention of runs' logs and outputs, and what a repository uses (issue
// 36): methods, error names and types added beside the others.

const (
	// Q, user (the repository's owner or an admin). Params: repo
	// (OWNER/NAME). Out: RepoUsage.
	MethodRepoUsage = "dev.knotless.repo.usage"
	// P, user (the repository's owner or an admin). In:
	// SetRetentionInput. Out: Retention. Keeping runs longer than the
	// server does (a rule at 0 where the server's is set, or a larger
	// number) is an admin's call: 403 for an owner.
	MethodSetRetention = "dev.knotless.repo.setRetention"
)

// Error names of expired bytes: 410 Gone, with a message saying when
// (MethodGetRunLog, MethodGetOutputs, MethodListOutputs).
const (
	ErrLogsExpired    = "LogsExpired"
	ErrOutputsExpired = "OutputsExpired"
)

// ErrObjectStoreUnavailable is the error name of a read of bytes the
// server moved to its object store (knotless-server --object-store) while
// the store cannot be used: 503, its message the store's one-line reason;
// try again later.
const ErrObjectStoreUnavailable = "ObjectStoreUnavailable"

// RetentionRules are the two rules of retention. A run's logs and outputs
// are removed once every rule that is set lets them go: it ended more
// than KeepLogsDays days ago, and its pipeline is not one of the
// KeepPipelines newest of its branch. 0 is not set (keep everything by
// that rule).
type RetentionRules struct {
	KeepLogsDays  int `json:"keepLogsDays"`
	KeepPipelines int `json:"keepPipelines"`
}

// OwnRetention is a repository's own rules; a nil one is the server's.
type OwnRetention struct {
	KeepLogsDays  *int `json:"keepLogsDays,omitempty"`
	KeepPipelines *int `json:"keepPipelines,omitempty"`
}

// Retention is a repository's retention: the rules in effect (Own's where
// set, else Server's), and who set Own when.
type Retention struct {
	Repo      string         `json:"repo"`
	Effective RetentionRules `json:"effective"`
	Server    RetentionRules `json:"server"` // knotless-server --keep-logs-days, --keep-pipelines
	Own       OwnRetention   `json:"own"`
	SetBy     string         `json:"setBy,omitempty"`
	SetAt     *time.Time     `json:"setAt,omitempty"`
}

// SetRetentionInput is the body of MethodSetRetention. A nil rule is left
// as it is; -1 returns it to the server's; 0 keeps everything by it.
type SetRetentionInput struct {
	Repo          string `json:"repo"`
	KeepLogsDays  *int   `json:"keepLogsDays,omitempty"`
	KeepPipelines *int   `json:"keepPipelines,omitempty"`
}

// UsageCount is bytes in a number of things.
type UsageCount struct {
	Bytes int64 `json:"bytes"`
	Count int64 `json:"count"`
}

// CacheStoreUsage is the latest CacheUsage a runner reported for a
// repository and a cache store, and when.
type CacheStoreUsage struct {
	CacheUsage
	ReportedAt time.Time `json:"reportedAt"`
}

// ExpiredUsage is what retention removed of a repository's runs.
type ExpiredUsage struct {
	Runs   int64      `json:"runs"`
	Bytes  int64      `json:"bytes"`            // what their logs and outputs held
	LastAt *time.Time `json:"lastAt,omitempty"` // the latest removal
}

// RepoUsage is the answer of MethodRepoUsage: what a repository's runs
// hold on the server, and its caches in the runners' stores.
type RepoUsage struct {
	Repo string `json:"repo"`
	// Logs are the step logs kept (Count: logs) with their line times;
	// Outputs the outputs archives kept (Count: runs with outputs).
	Logs    UsageCount `json:"logs"`
	Outputs UsageCount `json:"outputs"`
	// Caches are the latest reports, one per cache store, by store name;
	// none before a run with `caches:` completed.
	Caches  []CacheStoreUsage `json:"caches"`
	Expired ExpiredUsage      `json:"expired"`
	// Partial: more runs were not measured yet than the server counts on
	// demand; Logs is then a lower bound.
	Partial   bool      `json:"partial,omitempty"`
	Retention Retention `json:"retention"`
}

// String says the rules in a sentence, for people: "Kept for 30 days
// after a run ends, and always for the newest 5 pipelines of each
// branch."
func (r RetentionRules) String() string {
	days := fmt.Sprintf("for %d %s after a run ends", r.KeepLogsDays, plural(r.KeepLogsDays, "day", "days"))
	pipes := fmt.Sprintf("for the newest %d %s of each branch", r.KeepPipelines, plural(r.KeepPipelines, "pipeline", "pipelines"))
	switch {
	case r.KeepLogsDays > 0 && r.KeepPipelines > 0:
		return "Kept " + days + ", and always " + pipes + "."
	case r.KeepLogsDays > 0:
		return "Kept " + days + "."
	case r.KeepPipelines > 0:
		return "Kept " + pipes + "."
	}
	return "Kept forever."
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
