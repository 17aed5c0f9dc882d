package agent

import (
	"flag"
	"reflect"
	"slices"
	"testing"
	"time"
)

// TestServe_ArgsParseBackToTheSameFields: what an executor writes with
// Args is what the agent reads with Register, field for field, so the
// flag names live in one place only.
func TestServe_ArgsParseBackToTheSameFields(t *testing.T) {
	in := Serve{
		Dir: "/knotless/state", Socket: "/knotless/agent.sock", Workdir: "/workspace", Home: "/home/x",
		Tmp: "/tmp", PATH: "/usr/bin:/bin", Run: "run-42", Deadline: time.Date(2026, 12, 1, 10, 0, 0, 123, time.UTC),
		Linger: time.Minute, Heartbeat: 2 * time.Second, DeadAfter: 9 * time.Second,
		ExitWithParent: true, ExitWithoutClient: 30 * time.Second, NoCgroups: true,
		User: "ci:1000:1000:wheel", ReadyFD: 3, LogLevel: "debug",
	}
	var out Serve
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	out.Register(fs)
	args := in.Args()
	if args[0] != "serve" {
		t.Fatalf("args %q do not start with serve", args)
	}
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip:\n in  %+v\n out %+v\nargs %q", in, out, args)
	}
}

// TestServe_ZeroFieldsAreLeftOffTheCommandLine: a field left alone is the
// agent's default, not an empty value that would override it (an empty
// --path would give steps no PATH).
func TestServe_ZeroFieldsAreLeftOffTheCommandLine(t *testing.T) {
	if got := (Serve{}).Args(); !slices.Equal(got, []string{"serve"}) {
		t.Errorf("zero Serve: %q", got)
	}
	got := Serve{Dir: "d", Socket: "s"}.Args()
	if !slices.Equal(got, []string{"serve", "--dir=d", "--socket=s"}) {
		t.Errorf("Serve{Dir, Socket}: %q", got)
	}
}

func TestConnect_ArgsParseBack(t *testing.T) {
	in := Connect{Socket: "/knotless/agent.sock", Wait: 30 * time.Second, Wake: "/knotless/start"}
	var out Connect
	fs := flag.NewFlagSet("connect", flag.ContinueOnError)
	out.Register(fs)
	if err := fs.Parse(in.Args()[1:]); err != nil || out != in {
		t.Errorf("round trip of %q: %+v, %v", in.Args(), out, err)
	}
}

// TestValidID_OneRuleForRunsAndSteps pins the protocol's one ID rule.
func TestValidID_OneRuleForRunsAndSteps(t *testing.T) {
	for id, want := range map[string]bool{
		"run-1": true, "1": true, "a.b_c-d": true, string(make([]byte, 0)): false,
		"-run": false, ".x": false, "run/1": false, "run 1": false,
		"a123456789012345678901234567890123456789012345678901234567890ab":  true,  // 63
		"a123456789012345678901234567890123456789012345678901234567890abc": false, // 64
	} {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
}
