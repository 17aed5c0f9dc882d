package logmask

import "slices"

// automaton is an Aho–Corasick automaton over the patterns. Following it
// byte by byte tells, after each byte, the longest pattern ending there
// (to mask it) and how many trailing bytes are still the start of some
// longer pattern occurrence (which is exactly what must be held back).
//
// Memory is linear in the total length of the patterns: the root has a
// dense transition table, other states a sorted edge list.
type automaton struct {
	root  [256]int32 // transitions from the root state 0
	nodes []acNode
	edges []acEdge
	// maxLen is the length of the longest pattern.
	maxLen int
}

type acNode struct {
	lo, hi int32 // this state's edges are edges[lo:hi], sorted by byte
	fail   int32 // longest proper suffix that is a state
	depth  int32 // length of the string this state stands for
	out    int32 // longest pattern that is a suffix of it (0 = none)
	// hold is the length of the longest suffix of this state's string
	// that a longer pattern could still continue: what must be held back.
	hold int32
}

type acEdge struct {
	b  byte
	to int32
}

func newAutomaton(pats [][]byte) *automaton {
	// Build a trie first (edge lists in insertion order), then flatten it.
	type tnode struct {
		edges []acEdge
		depth int32
		term  bool
	}
	trie := []tnode{{}}
	a := &automaton{}
	for _, p := range pats {
		s := int32(0)
		for _, b := range p {
			t := int32(-1)
			if s == 0 {
				if r := a.root[b]; r != 0 {
					t = r
				}
			} else {
				for _, e := range trie[s].edges {
					if e.b == b {
						t = e.to
						break
					}
				}
			}
			if t < 0 {
				t = int32(len(trie))
				trie = append(trie, tnode{depth: trie[s].depth + 1})
				trie[s].edges = append(trie[s].edges, acEdge{b, t})
				if s == 0 {
					a.root[b] = t
				}
			}
			s = t
		}
		trie[s].term = true
		a.maxLen = max(a.maxLen, len(p))
	}
	a.nodes = make([]acNode, len(trie))
	for i := range trie {
		es := trie[i].edges
		slices.SortFunc(es, func(x, y acEdge) int { return int(x.b) - int(y.b) })
		a.nodes[i].lo = int32(len(a.edges))
		a.edges = append(a.edges, es...)
		a.nodes[i].hi = int32(len(a.edges))
		a.nodes[i].depth = trie[i].depth
		if trie[i].term {
			a.nodes[i].out = trie[i].depth
		}
		trie[i].edges = nil
	}
	// Breadth-first: fail links and outputs of shallower states are done
	// before deeper ones need them.
	queue := make([]int32, 0, len(trie))
	for _, e := range a.edges[a.nodes[0].lo:a.nodes[0].hi] {
		queue = append(queue, e.to) // depth 1: fail = root
		if n := &a.nodes[e.to]; n.hi > n.lo {
			n.hold = 1
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, e := range a.edges[a.nodes[s].lo:a.nodes[s].hi] {
			f := a.step(a.nodes[s].fail, e.b)
			n := &a.nodes[e.to]
			n.fail = f
			if n.out == 0 {
				n.out = a.nodes[f].out
			}
			if n.hi > n.lo {
				n.hold = n.depth
			} else {
				n.hold = a.nodes[f].hold
			}
			queue = append(queue, e.to)
		}
	}
	return a
}

// step is the state after reading b in state s.
func (a *automaton) step(s int32, b byte) int32 {
	for s != 0 {
		n := &a.nodes[s]
		for _, e := range a.edges[n.lo:n.hi] {
			if e.b == b {
				return e.to
			}
			if e.b > b {
				break
			}
		}
		s = n.fail
	}
	return a.root[b]
}
