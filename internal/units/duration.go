package units

import (
	"strings"
	"time"
)

// FormatDuration writes d as time.Duration.String does, without its zero
// tails: "5m" for 5m0s, "1h" for 1h0m0s, "1h30m" for 1h30m0s, "90s".
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
