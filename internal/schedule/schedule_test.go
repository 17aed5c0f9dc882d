package schedule

import (
	"strings"
	"testing"
	"time"
)

// now is the moment the tests parse at: a fixed day, so "never due" and
// the next times do not depend on the day the tests run.
var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func mustParse(t *testing.T, expr, zone string) *Spec {
	t.Helper()
	s, err := Parse(expr, zone, now)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", expr, zone, err)
	}
	return s
}

func utc(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		panic(err)
	}
	return t
}

// Parse refuses, with a message naming what to write instead, every
// expression that is not five fields or a name read in a zone the server
// reads the same on every host.
func TestParse_RefusesWhatIsNotFiveFieldsInAnIANAZone(t *testing.T) {
	tests := []struct{ expr, zone, want string }{
		{"", "", "the cron expression is empty"},
		{"   ", "", "the cron expression is empty"},
		{"0 0 3 * * *", "", `"0 0 3 * * *" is not a cron expression: it has 6 fields, not 5`},
		{"0 3 * *", "", "it has 4 fields, not 5"},
		{"0 24 * * *", "", `"0 24 * * *" is not a cron expression: the hour field "24" is out of range: hours are 0-23`},
		{"0 3 * * 7", "", `the day-of-week field "7" is out of range: days of the week are 0-6 (0 is Sunday) or sun-sat; for Sunday write 0 or sun`},
		{"0 0 L * *", "", `"0 0 L * *" is not a cron expression: the day-of-month field "L" is not taken: "L" is not a number, a range (1-5), a list (1,15), a step (*/15) or a name (mon, jan)`},
		{"0 0 * * 1#2", "", `"1#2" is not a number`},
		{"@fortnightly", "", "unrecognized descriptor"},
		{"@every 5m", "", `"@every 5m" is not a cron expression: @every runs relative to when the server read it; write the times as five fields, e.g. "*/5 * * * *"`},
		{"@every 1h", "", `e.g. "0 * * * *"`},
		{"@every 6h", "", `e.g. "0 */6 * * *"`},
		{"@every 7m", "", `e.g. "*/30 * * * *"`},
		{"@every", "", `e.g. "*/30 * * * *"`},
		{"CRON_TZ=Europe/Berlin 0 3 * * *", "", "names its time zone inside the expression; write the zone as timezone: beside cron:"},
		{"TZ=UTC 0 3 * * *", "", "names its time zone inside the expression"},
		{"0 3 * * *", "Mars/Olympus", `timezone "Mars/Olympus" is not an IANA time zone name`},
		{"0 3 * * *", "Local", "timezone Local depends on the server's host"},
		{"0 0 30 2 *", "", `"0 0 30 2 *" is never due in the next five years`},
		{"0 0 31 4 *", "Europe/Berlin", "is never due"},
	}
	for _, tc := range tests {
		s, err := Parse(tc.expr, tc.zone, now)
		if err == nil {
			t.Errorf("Parse(%q, %q) = %v, want an error containing %q", tc.expr, tc.zone, s, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%q, %q): %q\nwant one line containing %q", tc.expr, tc.zone, err, tc.want)
		}
	}
}

// Parse takes the five standard fields with ranges, lists, steps and
// names, every @daily-style name, and an IANA zone ("" is UTC); a date
// that only leap years have is due.
func TestParse_TakesFiveFieldsNamesAndZones(t *testing.T) {
	for _, tc := range []struct{ expr, zone, next string }{
		{"0 3 * * *", "", "2026-06-02 03:00"},
		{" 0 3 * * * ", "UTC", "2026-06-02 03:00"},
		{"*/15 9-17 * * mon-fri", "", "2026-06-01 12:15"},
		{"0 0 1 jan,jul *", "", "2026-07-01 00:00"},
		{"0 0 29 2 *", "", "2028-02-29 00:00"},
		{"@yearly", "", "2027-01-01 00:00"},
		{"@annually", "", "2027-01-01 00:00"},
		{"@monthly", "", "2026-07-01 00:00"},
		{"@weekly", "", "2026-06-07 00:00"}, // Sunday
		{"@daily", "", "2026-06-02 00:00"},
		{"@midnight", "", "2026-06-02 00:00"},
		{"@hourly", "", "2026-06-01 13:00"},
		{"0 3 * * *", "Europe/Berlin", "2026-06-02 01:00"},    // 03:00 CEST
		{"0 3 * * *", "America/New_York", "2026-06-02 07:00"}, // 03:00 EDT
		{"30 12 * * *", "Asia/Kolkata", "2026-06-02 07:00"},   // 12:30 IST
	} {
		s := mustParse(t, tc.expr, tc.zone)
		if got := s.Next(now); !got.Equal(utc(tc.next)) || got.Location() != time.UTC {
			t.Errorf("Parse(%q, %q).Next(%s) = %s, want %s UTC", tc.expr, tc.zone, now, got, tc.next)
		}
		if s.String() != strings.TrimSpace(tc.expr) {
			t.Errorf("String() = %q, want %q", s.String(), strings.TrimSpace(tc.expr))
		}
	}
}

// The fields are wall-clock times of the zone, as docs/workflow.md says:
// in Europe/Berlin, 02:30 is not due on the day clocks spring from 02:00
// to 03:00 (29 March 2026) and is due twice, an hour apart, on the day
// they fall back from 03:00 to 02:00 (25 October 2026); 03:00 is due once
// each day, an hour earlier in UTC in summer. If robfig/cron changed its
// rule, the page would be wrong: this fails first.
func TestNext_ReadsWallClockTimesAcrossDaylightSavingChanges(t *testing.T) {
	tests := []struct {
		expr, from string
		want       []string // UTC
	}{
		{"30 2 * * *", "2026-03-28 12:00", []string{"2026-03-30 00:30", "2026-03-31 00:30"}},
		{"30 2 * * *", "2026-10-24 12:00", []string{"2026-10-25 00:30", "2026-10-25 01:30", "2026-10-26 01:30"}},
		{"0 3 * * *", "2026-03-27 12:00", []string{"2026-03-28 02:00", "2026-03-29 01:00", "2026-03-30 01:00"}},
		{"0 3 * * *", "2026-10-24 12:00", []string{"2026-10-25 02:00", "2026-10-26 02:00"}},
		{"0 * * * *", "2026-03-28 23:30", []string{"2026-03-29 00:00", "2026-03-29 01:00", "2026-03-29 02:00"}},
	}
	for _, tc := range tests {
		s := mustParse(t, tc.expr, "Europe/Berlin")
		at := utc(tc.from)
		for _, w := range tc.want {
			at = s.Next(at)
			if !at.Equal(utc(w)) {
				t.Errorf("%q from %s: got %s, want %s UTC", tc.expr, tc.from, at, w)
				break
			}
		}
	}
}

// After a downtime the latest due time in [from, now] is the one that
// runs, once; the times before it are counted as missed. A stored time
// still ahead is not due.
func TestLatest_GivesTheLatestMissedTimeAndCountsThoseBefore(t *testing.T) {
	hourly := mustParse(t, "0 * * * *", "")
	tests := []struct {
		from, now, due string
		missed         int
		ok             bool
	}{
		{"2026-06-01 10:00", "2026-06-01 15:30", "2026-06-01 15:00", 5, true},
		{"2026-06-01 10:00", "2026-06-01 15:00", "2026-06-01 15:00", 5, true}, // now on a due time counts it
		{"2026-06-01 10:00", "2026-06-01 10:59", "2026-06-01 10:00", 0, true}, // due, nothing missed
		{"2026-06-01 10:00", "2026-06-01 10:00", "2026-06-01 10:00", 0, true},
		{"2026-06-01 10:00", "2026-06-01 09:59", "", 0, false},
		{"2026-05-01 00:00", "2026-06-01 00:30", "2026-06-01 00:00", 31 * 24, true},
	}
	for _, tc := range tests {
		due, missed, ok := hourly.Latest(utc(tc.from), utc(tc.now))
		if ok != tc.ok || missed != tc.missed || (ok && !due.Equal(utc(tc.due))) || (!ok && !due.IsZero()) {
			t.Errorf("Latest(%s, %s) = %s, %d, %v; want %s, %d, %v", tc.from, tc.now, due, missed, ok, tc.due, tc.missed, tc.ok)
		}
	}
}

// A downtime longer than maxSteps due times (two years of a schedule due
// every minute) is not walked time by time to the end: Latest jumps to
// the day before now and still gives the latest due time, counting at
// least maxSteps missed (not all of them: the jump skips the count).
func TestLatest_ALongDowntimeJumpsToTheLatestTime(t *testing.T) {
	every := mustParse(t, "* * * * *", "")
	from, at := utc("2024-01-01 00:00"), utc("2026-01-01 00:00").Add(30*time.Second)
	start := time.Now()
	due, missed, ok := every.Latest(from, at)
	if !ok || !due.Equal(utc("2026-01-01 00:00")) || missed < maxSteps {
		t.Errorf("Latest over two years = %s, %d, %v; want 2026-01-01 00:00, at least %d, true", due, missed, ok, maxSteps)
	}
	// A walk to the end would count every minute of the 731 days.
	if walked := 731 * 24 * 60; missed >= walked {
		t.Errorf("missed = %d: every one of the %d minutes was walked, no jump", missed, walked)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Latest took %s", took)
	}
	// Mornings only: the jump's day holds the latest time, 11:59.
	mornings := mustParse(t, "* 0-11 * * *", "")
	due, missed, ok = mornings.Latest(utc("2023-01-01 00:00"), utc("2026-01-01 23:00"))
	if !ok || !due.Equal(utc("2026-01-01 11:59")) || missed < maxSteps {
		t.Errorf("Latest of mornings = %s, %d, %v; want 2026-01-01 11:59, at least %d, true", due, missed, ok, maxSteps)
	}
}

// MinInterval is the shortest gap between two due times in the year after
// from, and 0 for what is due at most once a year: what the server
// compares with --schedule-min-interval.
func TestMinInterval_IsTheShortestGapInAYear(t *testing.T) {
	tests := []struct {
		expr, zone string
		want       time.Duration
	}{
		{"* * * * *", "", time.Minute},
		{"*/5 * * * *", "", 5 * time.Minute},
		{"0 3 * * *", "", 24 * time.Hour},
		{"0,1 3 * * *", "", time.Minute},
		{"0 3 * * 1,2", "", 24 * time.Hour},
		{"@weekly", "", 7 * 24 * time.Hour},
		{"@yearly", "", 0},
		{"0 0 29 2 *", "", 0},
		{"30 2 * * *", "Europe/Berlin", time.Hour}, // 02:30 twice on 25 October
	}
	for _, tc := range tests {
		for _, from := range []time.Time{now, utc("2026-12-31 23:59"), utc("2027-01-01 00:00")} {
			if got := mustParse(t, tc.expr, tc.zone).MinInterval(from); got != tc.want {
				t.Errorf("MinInterval(%q, %q) from %s = %s, want %s", tc.expr, tc.zone, from, got, tc.want)
			}
		}
	}
}

// Zone reads IANA names, "" and "UTC" as UTC, and refuses Local.
func TestZone_ReadsIANANamesAndRefusesLocal(t *testing.T) {
	for _, name := range []string{"", "UTC"} {
		if loc, err := Zone(name); err != nil || loc != time.UTC {
			t.Errorf("Zone(%q) = %v, %v; want UTC", name, loc, err)
		}
	}
	if loc, err := Zone("Europe/Berlin"); err != nil || loc.String() != "Europe/Berlin" {
		t.Errorf("Zone(Europe/Berlin) = %v, %v", loc, err)
	}
	for _, name := range []string{"Local", "Europe/Berln", "../etc/passwd"} {
		if _, err := Zone(name); err == nil {
			t.Errorf("Zone(%q) took it", name)
		}
	}
}
