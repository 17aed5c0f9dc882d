package main

import (
	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/server"
)

// retentionFlags adds the flags of server.Retention to f and returns their
// names (each also read from KNOTLESS_<NAME>).
func retentionFlags(f *pflag.FlagSet, r *server.Retention) []string {
	f.IntVar(&r.KeepLogsDays, "keep-logs-days", 0,
		"remove a run's step logs and outputs this many days after it ended (its record, result and steps stay, and its page says when); 0 keeps them forever. A repository's owner may set less (knotless repo set-retention)")
	f.IntVar(&r.KeepPipelines, "keep-pipelines", 0,
		"keep the logs and outputs of this many newest pipelines of each branch; with --keep-logs-days too, a run keeps them until both rules let them go; 0: not by count")
	f.DurationVar(&r.Grace, "retention-grace", server.DefaultRetentionGrace,
		"keep a run's logs and outputs at least this long after it ended, whatever the rules (a runner's last appends)")
	f.DurationVar(&r.Every, "retention-every", server.DefaultRetentionEvery,
		"time between two retention passes (each removes at most 100 runs' bytes, on one replica at a time)")
	return []string{"keep-logs-days", "keep-pipelines", "retention-grace", "retention-every"}
}

// checkRetention refuses negative rules (a usage error naming the flag).
func checkRetention(r server.Retention) error {
	switch {
	case r.KeepLogsDays < 0:
		return usagef("--keep-logs-days %d: want 0 (keep forever) or a number of days", r.KeepLogsDays)
	case r.KeepPipelines < 0:
		return usagef("--keep-pipelines %d: want 0 (not by count) or a number of pipelines", r.KeepPipelines)
	case r.Grace <= 0:
		return usagef("--retention-grace %s: want a duration > 0, e.g. 1h", r.Grace)
	case r.Every <= 0:
		return usagef("--retention-every %s: want a duration > 0, e.g. 1m", r.Every)
	}
	return nil
}
