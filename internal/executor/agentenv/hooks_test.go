package agentenv_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// TestHooks_AddedHooksRunAfterTheOnesThereUntilAnError pins Env.AddHooks,
// the one place hooks are composed (a driver adding a hook once wrapped
// the previous one by hand): added hooks run after the ones the Env has,
// nil hooks are skipped, the first Attached or Ready error ends its chain
// and is the chain's error, and every AroundStep's function gets the
// step's Result, in order, a nil one skipped.
func TestHooks_AddedHooksRunAfterTheOnesThereUntilAnError(t *testing.T) {
	var ran []string
	hooks := func(name string, fail bool) agentenv.Hooks {
		var err error
		if fail {
			err = errors.New(name + " failed")
		}
		return agentenv.Hooks{
			Attached: func(context.Context, *agent.Client, agent.AgentHello) error {
				ran = append(ran, name+".Attached")
				return err
			},
			Ready: func(context.Context, *agentenv.Session) error {
				ran = append(ran, name+".Ready")
				return err
			},
			AroundStep: func() func(*executor.Result) {
				ran = append(ran, name+".AroundStep")
				if fail {
					return nil
				}
				return func(r *executor.Result) { r.Note += name + ";" }
			},
		}
	}

	env := &agentenv.Env{}
	env.AddHooks(agentenv.Hooks{}) // nothing to add: nothing runs
	if env.Hooks.Attached != nil || env.Hooks.Ready != nil || env.Hooks.AroundStep != nil {
		t.Fatalf("empty hooks added made hooks: %+v", env.Hooks)
	}
	env.AddHooks(hooks("a", false))
	env.AddHooks(agentenv.Hooks{}) // skipped
	env.AddHooks(hooks("b", false))
	if err := env.Hooks.Attached(context.Background(), nil, agent.AgentHello{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Hooks.Ready(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	var res executor.Result
	env.Hooks.AroundStep()(&res)
	if want := []string{"a.Attached", "b.Attached", "a.Ready", "b.Ready", "a.AroundStep", "b.AroundStep"}; !slices.Equal(ran, want) {
		t.Errorf("ran %v, want %v", ran, want)
	}
	if res.Note != "a;b;" {
		t.Errorf("the step's Note is %q, want both AroundStep functions' in order (a;b;)", res.Note)
	}

	ran = nil
	env = &agentenv.Env{}
	env.AddHooks(hooks("a", true))
	env.AddHooks(hooks("b", false))
	if err := env.Hooks.Attached(context.Background(), nil, agent.AgentHello{}); err == nil || err.Error() != "a failed" {
		t.Errorf("Attached: %v, want the first hook's error", err)
	}
	if err := env.Hooks.Ready(context.Background(), nil); err == nil || err.Error() != "a failed" {
		t.Errorf("Ready: %v, want the first hook's error", err)
	}
	res = executor.Result{}
	if after := env.Hooks.AroundStep(); after != nil {
		after(&res)
	}
	if want := []string{"a.Attached", "a.Ready", "a.AroundStep", "b.AroundStep"}; !slices.Equal(ran, want) {
		t.Errorf("after a failing hook, ran %v, want %v", ran, want)
	}
	if res.Note != "b;" {
		t.Errorf("the step's Note is %q, want b's alone (a's AroundStep returned nil)", res.Note)
	}
}
