package units

import (
	"fmt"
	"math/big"
	"strings"
)

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
