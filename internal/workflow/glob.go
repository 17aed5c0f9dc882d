package workflow

import (
	"fmt"
	"unicode/utf8"
)

// Glob patterns select branches and tags by name (without refs/heads/ or
// refs/tags/). The syntax is path.Match's plus `**`:
//
//	*       any run of characters except '/'
//	**      any run of characters, '/' included
//	**/     at the start or after a '/': zero or more whole segments, so
//	        "a/**/b" matches "a/b" and "a/x/y/b", and "**/b" matches "b"
//	?       one character except '/'
//	[a-z]   one character (not '/') in the class; [^a-z] negates it
//	\c      the character c itself
//
// Matching is by Unicode character and runs in time proportional to
// len(pattern)*len(name), whatever the pattern.

type globKind uint8

const (
	globLit        globKind = iota // one literal rune
	globOne                        // ?
	globClass                      // [...]
	globStar                       // *
	globDStar                      // **
	globDStarSlash                 // **/ at a segment start
)

type globTok struct {
	kind   globKind
	r      rune
	ranges [][2]rune
	negate bool
}

// compileGlob parses pattern; errors say what is wrong at which byte.
func compileGlob(pattern string) ([]globTok, error) {
	var toks []globTok
	for i := 0; i < len(pattern); {
		r, size := utf8.DecodeRuneInString(pattern[i:])
		switch r {
		case '\\':
			if i+1 >= len(pattern) {
				return nil, fmt.Errorf("pattern %q ends with a backslash", pattern)
			}
			r2, s2 := utf8.DecodeRuneInString(pattern[i+1:])
			toks = append(toks, globTok{kind: globLit, r: r2})
			i += 1 + s2
		case '*':
			if i+1 < len(pattern) && pattern[i+1] == '*' {
				atSegStart := i == 0 || pattern[i-1] == '/'
				if atSegStart && i+2 < len(pattern) && pattern[i+2] == '/' {
					toks = append(toks, globTok{kind: globDStarSlash})
					i += 3
				} else {
					toks = append(toks, globTok{kind: globDStar})
					i += 2
				}
			} else {
				toks = append(toks, globTok{kind: globStar})
				i++
			}
		case '?':
			toks = append(toks, globTok{kind: globOne})
			i++
		case '[':
			t, n, err := compileClass(pattern, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, t)
			i = n
		default:
			toks = append(toks, globTok{kind: globLit, r: r})
			i += size
		}
	}
	return toks, nil
}

// compileClass parses the class starting at pattern[start] == '[' and
// returns the index just after its ']'.
func compileClass(pattern string, start int) (globTok, int, error) {
	t := globTok{kind: globClass}
	bad := func(why string) error {
		return fmt.Errorf("pattern %q: %s in the character class at byte %d", pattern, why, start+1)
	}
	i := start + 1
	if i < len(pattern) && pattern[i] == '^' {
		t.negate = true
		i++
	}
	classChar := func() (rune, error) {
		if i >= len(pattern) {
			return 0, bad("missing ]")
		}
		r, size := utf8.DecodeRuneInString(pattern[i:])
		switch r {
		case '\\':
			if i+1 >= len(pattern) {
				return 0, bad("backslash at the end")
			}
			r2, s2 := utf8.DecodeRuneInString(pattern[i+1:])
			i += 1 + s2
			return r2, nil
		case '-', ']':
			return 0, bad(fmt.Sprintf("unescaped %q", r))
		}
		i += size
		return r, nil
	}
	for {
		if i >= len(pattern) {
			return t, 0, bad("missing ]")
		}
		if pattern[i] == ']' && len(t.ranges) > 0 {
			return t, i + 1, nil
		}
		lo, err := classChar()
		if err != nil {
			return t, 0, err
		}
		hi := lo
		if i < len(pattern) && pattern[i] == '-' {
			i++
			if hi, err = classChar(); err != nil {
				return t, 0, err
			}
			if hi < lo {
				return t, 0, bad(fmt.Sprintf("range %c-%c is backwards", lo, hi))
			}
		}
		t.ranges = append(t.ranges, [2]rune{lo, hi})
	}
}

func (t *globTok) matchOne(r rune) bool {
	switch t.kind {
	case globLit:
		return r == t.r
	case globOne:
		return r != '/'
	case globClass:
		if r == '/' {
			return false
		}
		in := false
		for _, rg := range t.ranges {
			if rg[0] <= r && r <= rg[1] {
				in = true
				break
			}
		}
		return in != t.negate
	}
	return false
}

// MatchGlob reports whether name matches the glob pattern (syntax above).
// An invalid pattern matches nothing. Parse rejects invalid patterns, so
// for a parsed Workflow this never happens.
func MatchGlob(pattern, name string) bool {
	toks, err := compileGlob(pattern)
	if err != nil {
		return false
	}
	return matchTokens(toks, name)
}

// matchTokens simulates the pattern as an NFA: state 2*i means "before
// token i", state 2*i+1 means "inside the segments of a **/ token i".
func matchTokens(toks []globTok, name string) bool {
	n := len(toks)
	cur := make([]bool, 2*n+2)
	next := make([]bool, 2*n+2)
	cur[0] = true
	closure := func(set []bool) {
		// Epsilon moves only go forward, so one pass in order suffices.
		for i := 0; i < n; i++ {
			if !set[2*i] {
				continue
			}
			switch toks[i].kind {
			case globStar, globDStar:
				set[2*(i+1)] = true
			case globDStarSlash:
				set[2*i+1] = true
				set[2*(i+1)] = true
			}
		}
	}
	closure(cur)
	for _, r := range name {
		clear(next)
		alive := false
		for i := 0; i < n; i++ {
			t := &toks[i]
			if cur[2*i] {
				switch t.kind {
				case globStar:
					if r != '/' {
						next[2*i] = true
						alive = true
					}
				case globDStar:
					next[2*i] = true
					alive = true
				case globDStarSlash:
				default:
					if t.matchOne(r) {
						next[2*(i+1)] = true
						alive = true
					}
				}
			}
			if cur[2*i+1] {
				next[2*i+1] = true
				alive = true
				if r == '/' {
					next[2*(i+1)] = true
				}
			}
		}
		if !alive {
			return false
		}
		closure(next)
		cur, next = next, cur
	}
	return cur[2*n]
}
