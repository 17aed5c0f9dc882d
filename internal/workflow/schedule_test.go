package workflow

import (
	"reflect"
	"testing"
)

// Every written form of on.schedule reaches Triggers.Schedule as written,
// with UTC for a zone left out, "" for the default branch and the entry's
// own line and column; other events stay off unless written.
func TestParse_ScheduleFormsReadAsWritten(t *testing.T) {
	src := `on:
  schedule:
    - cron: "0 3 * * *"
    - cron: 30 2 * * 1-5
      timezone: Europe/Berlin
      branch: release/1.2
    - {cron: "@weekly", timezone: UTC}
    - cron: "0 3 * * *"
      branch: main
steps: [{run: x}]
`
	w := mustParse(t, "w.yml", src)
	want := Triggers{Schedule: []ScheduleTrigger{
		{Cron: "0 3 * * *", TimeZone: "UTC", Line: 3, Column: 7},
		{Cron: "30 2 * * 1-5", TimeZone: "Europe/Berlin", Branch: "release/1.2", Line: 4, Column: 7},
		{Cron: "@weekly", TimeZone: "UTC", Line: 7, Column: 7},
		{Cron: "0 3 * * *", TimeZone: "UTC", Branch: "main", Line: 8, Column: 7},
	}}
	if !reflect.DeepEqual(w.On, want) {
		t.Errorf("On = %+v\nwant %+v", w.On, want)
	}
}

// A schedule beside other events keeps them; a workflow without on: has
// no schedule (the default is pushes and manual triggers only).
func TestParse_ScheduleBesideOtherEventsAndNoneByDefault(t *testing.T) {
	w := mustParse(t, "w.yml", "on:\n  push: {branches: [main]}\n  manual: {}\n  schedule: [{cron: \"@hourly\"}]\nsteps: [{run: x}]\n")
	if w.On.Push == nil || !w.On.Manual || len(w.On.Schedule) != 1 || w.On.Schedule[0].Cron != "@hourly" {
		t.Errorf("On = %s schedule %+v", showTriggers(w.On), w.On.Schedule)
	}
	w = mustParse(t, "w.yml", "steps: [{run: x}]\n")
	if w.On.Schedule != nil {
		t.Errorf("a workflow without on: has schedule %+v", w.On.Schedule)
	}
}

// A schedule's run matches the workflows that list a time, whatever the
// ref (the server picks the workflow by path); a workflow without
// on.schedule, one with only other events, and a nil one match none.
func TestMatches_ScheduleSelectsWorkflowsWithATime(t *testing.T) {
	scheduled := mustParse(t, "w.yml", "on:\n  schedule: [{cron: \"0 3 * * *\", branch: release}]\nsteps: [{run: x}]\n")
	for _, ref := range []string{"refs/heads/release", "refs/heads/main", ""} {
		if !scheduled.Matches(Event{Kind: EventSchedule, Ref: ref}) {
			t.Errorf("a scheduled workflow does not match a schedule's run on %q", ref)
		}
	}
	for _, ev := range []Event{{Kind: EventPush, Ref: "refs/heads/main"}, {Kind: EventManual}} {
		if scheduled.Matches(ev) {
			t.Errorf("a workflow with only on.schedule matches %+v", ev)
		}
	}
	if byDefault := mustParse(t, "w.yml", "steps: [{run: x}]\n"); byDefault.Matches(Event{Kind: EventSchedule, Ref: "refs/heads/main"}) {
		t.Error("a workflow without on: matches a schedule's run")
	}
	if other := mustParse(t, "w.yml", "on: {push: , manual: {}}\nsteps: [{run: x}]\n"); other.Matches(Event{Kind: EventSchedule}) {
		t.Error("a workflow on push and manual matches a schedule's run")
	}
	if (*Workflow)(nil).Matches(Event{Kind: EventSchedule}) {
		t.Error("a nil workflow matches a schedule's run")
	}
}
