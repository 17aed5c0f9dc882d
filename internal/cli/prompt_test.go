package cli

import (
	"strings"
	"testing"
	"time"
)

func TestSecretValue_StdinLosesExactlyOneTrailingNewline(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"v", "v"},
		{"v\n", "v"},
		{"v\n\n", "v\n"},
		{"  spaced  \n", "  spaced  "},
		{"line1\nline2\n", "line1\nline2"},
		{"crlf\r\n", "crlf\r"},
	} {
		s := &session{app: &App{Stdin: strings.NewReader(c.in)}, getenv: env{}.get, now: time.Now}
		got, err := s.readSecretValue("X")
		if err != nil || string(got) != c.want {
			t.Errorf("stdin %q: got %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestSecretValue_EmptyIsRefused(t *testing.T) {
	for _, in := range []string{"", "\n"} {
		s := &session{app: &App{Stdin: strings.NewReader(in)}, getenv: env{}.get, now: time.Now}
		if _, err := s.readSecretValue("X"); err == nil {
			t.Errorf("stdin %q: an empty value was accepted", in)
		} else if code, _ := classify(err, errContext{ranCommand: true}); code != ExitFailed {
			t.Errorf("stdin %q: exit %d, want %d", in, code, ExitFailed)
		}
	}
}

func TestSecretSet_HasNoValueFlagOrArgument(t *testing.T) {
	e := isolatedEnv(t)
	e[EnvServer], e[EnvToken] = "http://127.0.0.1:1", "t"
	for _, args := range [][]string{
		{"secret", "set", "X", "--repo", "a/b", "--value", "v"},
		{"secret", "set", "X", "value", "--repo", "a/b"},
	} {
		if r := runCLI(t, e, "", strings.NewReader("v"), args...); r.code != ExitUsage {
			t.Errorf("%q: exit %d, want %d", args, r.code, ExitUsage)
		}
	}
}
