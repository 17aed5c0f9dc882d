package web

import (
	"strings"
	"testing"
)

func TestLocalPath_RefusesOtherSites(t *testing.T) {
	for in, want := range map[string]string{
		"/alice/app":            "/alice/app",
		"/-/runs/4?x=1":         "/-/runs/4?x=1",
		"//evil.example/":       "/",
		"/\\evil.example":       "/",
		"https://evil.example/": "/",
		"":                      "/",
		"/a\r\nSet-Cookie: x":   "/",
	} {
		if got := localPath(in); got != want {
			t.Errorf("localPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCut_PartialLineWaitsUntilItEndsOrTheStepDoes(t *testing.T) {
	if n := cut([]byte("one\ntwo\nthr"), false); n != 8 {
		t.Errorf("running step: cut = %d, want 8 (whole lines only)", n)
	}
	if n := cut([]byte("thr"), false); n != 0 {
		t.Errorf("running step, no newline: cut = %d, want 0 (wait)", n)
	}
	if n := cut([]byte("one\nthr"), true); n != 7 {
		t.Errorf("finished step: cut = %d, want 7 (everything)", n)
	}
}

func TestCut_FullChunkNeverSplitsARune(t *testing.T) {
	chunk := []byte(strings.Repeat("a", maxEvent-2) + "é") // é is 2 bytes: ends exactly at maxEvent
	if n := cut(chunk, false); n != maxEvent {
		t.Errorf("whole rune at the end: cut = %d, want %d", n, maxEvent)
	}
	chunk = []byte(strings.Repeat("a", maxEvent-1) + "€")[:maxEvent] // € (3 bytes) cut after its first
	if n := cut(chunk, false); n != maxEvent-1 {
		t.Errorf("rune split by the chunk: cut = %d, want %d", n, maxEvent-1)
	}
}

func TestParseOffsets_IgnoresWhatIsNotStepColonOffset(t *testing.T) {
	got := parseOffsets("0:10,1:x,2:-3,-1:4,3:7,junk")
	if len(got) != 2 || got[0] != 10 || got[3] != 7 {
		t.Fatalf("parseOffsets = %v, want map[0:10 3:7]", got)
	}
}
