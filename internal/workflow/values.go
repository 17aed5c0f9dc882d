package workflow

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// ParseSize parses a size in Kubernetes quantity syntax into bytes:
// a decimal number ("1000", "1.5", "2e3") with an optional suffix, binary
// (Ki, Mi, Gi, Ti, Pi, Ei: powers of 1024) or decimal (k, M, G, T, P, E:
// powers of 1000). The result must be a whole number of bytes, greater
// than zero and at most MaxInt64. Errors say what was expected.
func ParseSize(s string) (int64, error) {
	q, suffix, err := parseQuantity(s)
	if err != nil {
		return 0, err
	}
	mult, ok := sizeSuffixes[suffix]
	if !ok {
		return 0, fmt.Errorf("unknown size suffix %q in %q; use Ki, Mi, Gi, Ti (1024-based) or k, M, G, T (1000-based)", suffix, s)
	}
	q.Mul(q, new(big.Rat).SetInt(mult))
	if q.Sign() <= 0 {
		return 0, fmt.Errorf("size %q must be greater than zero", s)
	}
	if !q.IsInt() {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	n := q.Num()
	if !n.IsInt64() {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n.Int64(), nil
}

// ParseCPUs checks a CPU amount in Kubernetes quantity syntax ("2", "0.5",
// "500m") and returns it in millicores. It must be at least 1m and is
// refused if it is not a whole number of millicores.
func ParseCPUs(s string) (int64, error) {
	q, suffix, err := parseQuantity(s)
	if err != nil {
		return 0, err
	}
	switch suffix {
	case "":
		q.Mul(q, big.NewRat(1000, 1))
	case "m":
	default:
		return 0, fmt.Errorf("unknown CPU suffix %q in %q; write whole or fractional CPUs (\"2\", \"0.5\") or millicores (\"500m\")", suffix, s)
	}
	if q.Sign() <= 0 {
		return 0, fmt.Errorf("cpus %q must be greater than zero", s)
	}
	if !q.IsInt() {
		return 0, fmt.Errorf("cpus %q is finer than one millicore (1m = 0.001)", s)
	}
	n := q.Num()
	if !n.IsInt64() || n.Int64() > 1_000_000_000 {
		return 0, fmt.Errorf("cpus %q is too large", s)
	}
	return n.Int64(), nil
}

var sizeSuffixes = func() map[string]*big.Int {
	m := map[string]*big.Int{"": big.NewInt(1)}
	for i, s := range []string{"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"} {
		m[s] = new(big.Int).Lsh(big.NewInt(1), uint(10*(i+1)))
	}
	for i, s := range []string{"k", "M", "G", "T", "P", "E"} {
		m[s] = new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(3*(i+1))), nil)
	}
	return m
}()

// parseQuantity splits "1.5e3Gi" into the number 1500 and the suffix
// "Gi". Digits and the exponent are bounded so that no input can make it
// allocate much.
func parseQuantity(s string) (*big.Rat, string, error) {
	bad := func(why string) error {
		return fmt.Errorf("invalid quantity %q: %s; expected a number with an optional unit, like 4Gi, 512Mi, 10G or 1000", s, why)
	}
	if s == "" {
		return nil, "", bad("empty")
	}
	i := 0
	if s[0] == '+' {
		i++
	} else if s[0] == '-' {
		return nil, "", bad("negative")
	}
	var mant strings.Builder
	digits, fracDigits, seenDot := 0, 0, false
	for ; i < len(s); i++ {
		c := s[i]
		if c >= '0' && c <= '9' {
			mant.WriteByte(c)
			digits++
			if seenDot {
				fracDigits++
			}
			continue
		}
		if c == '.' && !seenDot {
			seenDot = true
			continue
		}
		break
	}
	if digits == 0 {
		return nil, "", bad("no digits")
	}
	if digits > 30 {
		return nil, "", bad("too many digits")
	}
	exp := 0
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		neg := false
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			neg = s[j] == '-'
			j++
		}
		k := j
		for k < len(s) && s[k] >= '0' && s[k] <= '9' && k-j < 3 {
			exp = exp*10 + int(s[k]-'0')
			k++
		}
		// "2E" (exa) is a suffix, not an exponent without digits.
		if k > j {
			if k < len(s) && s[k] >= '0' && s[k] <= '9' {
				return nil, "", bad("exponent too large")
			}
			if neg {
				exp = -exp
			}
			i = k
		} else {
			exp = 0
		}
	}
	exp -= fracDigits
	if exp > 60 || exp < -60 {
		return nil, "", bad("exponent too large")
	}
	n, _ := new(big.Int).SetString(mant.String(), 10)
	q := new(big.Rat).SetInt(n)
	p := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(exp))), nil)
	if exp >= 0 {
		q.Mul(q, new(big.Rat).SetInt(p))
	} else {
		q.Quo(q, new(big.Rat).SetInt(p))
	}
	return q, s[i:], nil
}

func abs(i int) int {
	if i < 0 {
		return -i
	}
	return i
}

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

// FormatSize writes a byte count as ParseSize reads it back: with the
// largest 1024-based suffix (Ki, Mi, Gi, Ti) that divides it exactly,
// else in plain bytes ("2Gi", "1536Mi", "1000000").
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
