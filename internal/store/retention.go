package store

import "time"

// Retention of runs' logs and outputs, and what a repository uses (issue
// 36): the types of the Store methods at the end of its interface.

// RetentionPolicy is how long runs keep their logs and outputs. A run's
// bytes go once every rule that is set lets them go: it ended more than
// KeepLogsDays days ago, and its pipeline is not one of the KeepPipelines
// newest of its branch (ref). A rule at 0 is not set; with neither set
// nothing expires.
type RetentionPolicy struct {
	KeepLogsDays  int // days after the run's end; 0: not by age
	KeepPipelines int // newest pipelines of each branch kept; 0: not by count
}

// Expires reports whether the policy removes anything at all.
func (p RetentionPolicy) Expires() bool { return p.KeepLogsDays > 0 || p.KeepPipelines > 0 }

// RepoRetention is a repository's own policy, set by its owner; a nil
// field is the server's setting for that rule.
type RepoRetention struct {
	RepoID        int64
	KeepLogsDays  *int
	KeepPipelines *int
	SetBy         string // handle of who set it ("" when never set)
	SetAt         time.Time
}

// Apply returns the policy in effect: r's rules where set, else server's.
func (r RepoRetention) Apply(server RetentionPolicy) RetentionPolicy {
	if r.KeepLogsDays != nil {
		server.KeepLogsDays = *r.KeepLogsDays
	}
	if r.KeepPipelines != nil {
		server.KeepPipelines = *r.KeepPipelines
	}
	return server
}

// RunBytes is what an ended run's logs and outputs hold, measured once.
type RunBytes struct {
	RunID        int64
	LogsBytes    int64 // step logs and their line times, in bytes
	Logs         int   // step logs
	OutputsBytes int64 // the outputs archive, in bytes
	MeasuredAt   time.Time
}

// ExpiryQuery selects runs whose logs and outputs retention removes now.
type ExpiryQuery struct {
	// Server is the server's policy; a repository's RepoRetention
	// overrides it rule by rule.
	Server RetentionPolicy
	// Now is the time the days are counted back from.
	Now time.Time
	// EndedBefore: only runs that ended before it (a grace after their
	// end, during which a late log append may still arrive).
	EndedBefore time.Time
	Limit       int // at most this many runs (required, > 0)
}

// CacheUsage is the latest report of a repository's caches in one cache
// store (api.CacheUsage, as a runner sent it with a run's completion).
type CacheUsage struct {
	RepoID     int64
	Store      string // api.CacheUsage.Store
	Entries    int
	Bytes      int64
	ReportedAt time.Time
}

// RepoUsage is what a repository's runs hold, from the database alone.
type RepoUsage struct {
	// LogsBytes and Logs sum the measured runs whose bytes are kept;
	// OutputsBytes and Outputs the stored outputs archives not expired.
	LogsBytes    int64
	Logs         int64
	OutputsBytes int64
	Outputs      int64
	// ExpiredRuns counts the runs whose bytes retention removed,
	// ExpiredBytes what they held, LastExpiredAt the latest removal
	// (nil: none).
	ExpiredRuns   int64
	ExpiredBytes  int64
	LastExpiredAt *time.Time
	// Unmeasured are the repository's runs that are not queued and not
	// measured yet (running, or ended within the grace), newest first, at
	// most the limit asked; UnmeasuredMore is set when there are more.
	Unmeasured     []int64
	UnmeasuredMore bool
	// Caches are the latest reports, one per cache store, by store name.
	Caches []CacheUsage
}
