package workflow

import (
	"path"
	"strings"
	"testing"
	"time"
)

func TestMatchGlob(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"main", "main", true},
		{"main", "mainline", false},
		{"release/*", "release/1.0", true},
		{"release/*", "release/1.0/hotfix", false}, // * stays in one segment
		{"release/*", "release/", true},
		{"release/*", "release", false},
		{"release/**", "release/1.0/hotfix", true},
		{"release/**", "release", false},
		{"**", "any/thing/at/all", true},
		{"**", "", true},
		{"*", "feature/x", false},
		{"**/fix", "fix", true}, // **/ may match no segment
		{"**/fix", "a/b/fix", true},
		{"**/fix", "a/bfix", false},
		{"a/**/b", "a/b", true},
		{"a/**/b", "a/x/y/b", true},
		{"a/**/b", "a/xb", false},
		{"v**", "v1/2", true}, // ** inside a segment crosses '/' too
		{"v*", "v1.2.3", true},
		{"v*", "x1", false},
		{"v?.?", "v1.2", true},
		{"v?.?", "v1/2", false}, // ? never matches '/'
		{"v[0-9].*", "v1.0", true},
		{"v[0-9].*", "va.0", false},
		{"v[^0-9]", "va", true},
		{"v[^0-9]", "v1", false},
		{"[a-c]/[x]", "b/x", true},
		{"[/]", "/", false},
		{"[^a]", "/", false}, // classes never match /, unlike path.Match
		{`a\*b`, "a*b", true},
		{`a\*b`, "axb", false},
		{"über/*", "über/straße", true},
		{"?", "ü", true},
		{"rel[", "rel[", false}, // an invalid pattern matches nothing
		{"", "", true},
		{"", "x", false},
		{"*-rc*", "1.0-rc1", true},
		{"**-rc*", "a/1.0-rc1", true},
	}
	for _, tc := range tests {
		if got := MatchGlob(tc.pattern, tc.name); got != tc.want {
			t.Errorf("MatchGlob(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

// Without ** the syntax is path.Match's, and so must be the answers, with
// one deliberate difference: our character classes never match '/', while
// path.Match lets a negated class ("[^a]") match it.
func TestMatchGlob_AgreesWithPathMatchWithoutDoubleStar(t *testing.T) {
	patterns := []string{"*", "a*", "*b", "a*b", "a/*", "*/b", "?", "a?c", "[ab]*", "[^a]?", "a/b", `\a*`, "*/*/*", "[a-c][^x]"}
	names := []string{"", "a", "b", "ab", "abc", "a/b", "a/b/c", "xb", "ba", "a/", "/b", "acb", "axc", "b/c/d"}
	for _, p := range patterns {
		for _, n := range names {
			if strings.Contains(p, "[") && strings.Contains(n, "/") {
				continue
			}
			want, err := path.Match(p, n)
			if err != nil {
				t.Fatalf("path.Match(%q): %v", p, err)
			}
			if got := MatchGlob(p, n); got != want {
				t.Errorf("MatchGlob(%q, %q) = %v, path.Match says %v", p, n, got, want)
			}
		}
	}
}

func TestMatchGlob_HostilePatternIsFast(t *testing.T) {
	pattern := strings.Repeat("*a", 50) + "b"
	name := strings.Repeat("a", 5000)
	start := time.Now()
	if MatchGlob(pattern, name) {
		t.Fatal("matched")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v; matching must be linear in the name", d)
	}
}

func TestMatches(t *testing.T) {
	const steps = "\nsteps: [{run: x}]\n"
	push := func(ref string) Event { return Event{Kind: EventPush, Ref: ref} }
	tests := []struct {
		name string
		on   string // the on: section, "" = omitted
		ev   Event
		want bool
	}{
		{"DefaultPushAnyBranch", "", push("refs/heads/feature/x"), true},
		{"DefaultNoTags", "", push("refs/tags/v1.0"), false},
		{"DefaultManual", "", Event{Kind: EventManual}, true},
		{"DefaultNoPull", "", Event{Kind: EventPull, Ref: "refs/heads/main"}, false},
		{"BranchFilterMatches", "on: {push: {branches: [main, \"release/*\"]}}", push("refs/heads/release/2.0"), true},
		{"BranchFilterMisses", "on: {push: {branches: [main, \"release/*\"]}}", push("refs/heads/feature"), false},
		{"BranchFilterSingleSegment", "on: {push: {branches: [\"release/*\"]}}", push("refs/heads/release/2.0/fix"), false},
		{"BranchFilterDoubleStar", "on: {push: {branches: [\"release/**\"]}}", push("refs/heads/release/2.0/fix"), true},
		{"BranchFilterNoTags", "on: {push: {branches: [main]}}", push("refs/tags/main"), false},
		{"TagPattern", "on: {push: {tags: [\"v*\"]}}", push("refs/tags/v1.2.3"), true},
		{"TagPatternMisses", "on: {push: {tags: [\"v*\"]}}", push("refs/tags/nightly"), false},
		{"TagsStillAllBranches", "on: {push: {tags: [\"v*\"]}}", push("refs/heads/dev"), true},
		{"TagsOnlyWithEmptyBranches", "on: {push: {branches: [], tags: [\"v*\"]}}", push("refs/heads/main"), false},
		{"TagsOnlyTagMatches", "on: {push: {branches: [], tags: [\"v*\"]}}", push("refs/tags/v2"), true},
		{"ManualOnlyNoPush", "on: {manual: {}}", push("refs/heads/main"), false},
		{"ManualOnly", "on: {manual: {}}", Event{Kind: EventManual}, true},
		{"NoManual", "on: {push: {}}", Event{Kind: EventManual}, false},
		{"ManualFalse", "on: {push: {}, manual: false}", Event{Kind: EventManual}, false},
		{"PullByTarget", "on: {pull: {branches: [main]}}", Event{Kind: EventPull, Ref: "refs/heads/main"}, true},
		{"PullBareName", "on: {pull: {branches: [main]}}", Event{Kind: EventPull, Ref: "main"}, true},
		{"PullOtherTarget", "on: {pull: {branches: [main]}}", Event{Kind: EventPull, Ref: "refs/heads/dev"}, false},
		{"PullAnyTarget", "on: {pull: }", Event{Kind: EventPull, Ref: "refs/heads/dev"}, true},
		{"PullNotPush", "on: {pull: }", push("refs/heads/dev"), false},
		{"OtherRef", "", push("refs/notes/commits"), false},
		{"EmptyBranchName", "", push("refs/heads/"), false},
		{"UnknownKind", "", Event{Kind: "delete", Ref: "refs/heads/main"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := mustParse(t, "w.yml", tc.on+steps)
			if got := w.Matches(tc.ev); got != tc.want {
				t.Errorf("Matches(%+v) = %v, want %v (on: %+v)", tc.ev, got, tc.want, w.On)
			}
		})
	}
	var nilW *Workflow
	if nilW.Matches(Event{Kind: EventManual}) {
		t.Error("a nil Workflow matched")
	}
}
