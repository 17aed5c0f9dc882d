package workflow

import (
	"fmt"
	"strings"
	"time"
)

// parseDuration parses a positive Go duration ("30m", "1h30m").
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q; expected a Go duration like 30m, 1h30m or 90s (units h, m, s; no days)", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("duration %q must be greater than zero", s)
	}
	return d, nil
}

// ValidEnvName reports whether s is a valid environment variable name:
// [A-Za-z_][A-Za-z0-9_]*.
func ValidEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// reservedEnv reports whether knotless itself sets the variable name for
// every step, so a workflow may not set it.
func reservedEnv(s string) bool {
	return s == "CI" || s == "HOME" || s == "KNOTLESS" || strings.HasPrefix(s, "KNOTLESS_")
}

// suggest returns the candidate closest to key, or "" if none is close
// enough to be a likely typo.
func suggest(key string, candidates []string) string {
	norm := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "_", "-") }
	best, bestD := "", 1<<30
	for _, c := range candidates {
		d := editDistance(norm(key), norm(c))
		limit := 2
		if len(c) <= 4 {
			limit = 1
		}
		if d <= limit && d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the optimal-string-alignment distance (Levenshtein
// plus adjacent transpositions), so "stpes" is one edit from "steps".
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30
	}
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
