package schedule

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Spec is one parsed schedule: an expression in a time zone.
type Spec struct {
	expr string
	loc  *time.Location
	s    cron.Schedule
}

// parser takes the five standard fields (minute hour day-of-month month
// day-of-week) and the names @yearly, @annually, @monthly, @weekly,
// @daily, @midnight and @hourly.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// horizon is how far Parse looks for a first due time: robfig/cron gives
// up after five years, so an expression due only on 30 February is
// refused rather than never firing.
const horizon = 5 * 365 * 24 * time.Hour

// Parse reads expr in the IANA time zone zone ("" is UTC) and checks that
// it is ever due after now. Errors are one line for a user, naming what
// is wrong: a field out of range, a wrong count of fields, @every (its
// times depend on when the server read it, so they are not kept once
// across restarts), a CRON_TZ= or TZ= prefix (write the zone apart),
// "Local" or an unknown zone, or an expression that is never due.
func Parse(expr, zone string, now time.Time) (*Spec, error) {
	e := strings.TrimSpace(expr)
	switch {
	case e == "":
		return nil, errors.New("the cron expression is empty; write five fields (minute hour day-of-month month day-of-week), e.g. \"0 3 * * *\", or a name such as @daily")
	case strings.HasPrefix(e, "@every"):
		return nil, fmt.Errorf("%q is not a cron expression: @every runs relative to when the server read it; write the times as five fields, e.g. %q", e, everyHint(e))
	case strings.HasPrefix(e, "CRON_TZ=") || strings.HasPrefix(e, "TZ="):
		return nil, fmt.Errorf("%q names its time zone inside the expression; write the zone as timezone: beside cron:", e)
	}
	loc, err := Zone(zone)
	if err != nil {
		return nil, err
	}
	s, err := parser.Parse(e)
	if err != nil {
		if field := badField(e); field != "" {
			return nil, fmt.Errorf("%q is not a cron expression: %s", e, field)
		}
		return nil, fmt.Errorf("%q is not a cron expression: %s; write five fields (minute hour day-of-month month day-of-week) or a name such as @daily", e, reason(err))
	}
	sp := &Spec{expr: e, loc: loc, s: s}
	if sp.Next(now).IsZero() {
		return nil, fmt.Errorf("%q is never due in the next five years (a day that does not exist, such as 30 February?)", e)
	}
	return sp, nil
}

// Two of robfig/cron's messages, said shorter: the count of fields
// (robfig appends the fields as a Go slice) and a field that is no number
// (robfig appends strconv's error).
var (
	fieldCount = regexp.MustCompile(`^expected exactly (\d+) fields, found (\d+): `)
	notANumber = regexp.MustCompile(`^failed to parse int from (.*?): strconv\.`)
)

// reason is robfig/cron's parse error for a user: "it has 4 fields, not
// 5", "\"L\" is not a number or a name", or robfig's own words (a value
// out of range names the range).
func reason(err error) string {
	msg := err.Error()
	if m := fieldCount.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("it has %s fields, not %s", m[2], m[1])
	}
	if m := notANumber.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%q is not a number, a range (1-5), a list (1,15), a step (*/15) or a name (mon, jan)", m[1])
	}
	return msg
}

// fields names the five fields, in order, and their values.
var fields = [5]struct{ name, values string }{
	{"minute", "minutes are 0-59"},
	{"hour", "hours are 0-23"},
	{"day-of-month", "days of the month are 1-31"},
	{"month", "months are 1-12 or jan-dec"},
	{"day-of-week", "days of the week are 0-6 (0 is Sunday) or sun-sat"},
}

// badField says which of five fields robfig/cron refused, and why, in
// words: `the hour field "25" is out of range: hours are 0-23`; "" when
// e has not five fields or each parses alone (in the place of a "*").
func badField(e string) string {
	f := strings.Fields(e)
	if len(f) != len(fields) {
		return ""
	}
	for i := range f {
		alone := []string{"*", "*", "*", "*", "*"}
		alone[i] = f[i]
		_, err := parser.Parse(strings.Join(alone, " "))
		if err == nil {
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "above maximum") || strings.Contains(msg, "below minimum") {
			msg = "is out of range: " + fields[i].values
			if i == 4 && strings.Contains(f[i], "7") {
				msg += "; for Sunday write 0 or sun"
			}
		} else {
			msg = "is not taken: " + reason(err)
		}
		return fmt.Sprintf("the %s field %q %s", fields[i].name, f[i], msg)
	}
	return ""
}

// everyHint is five fields for an "@every D": every m minutes or h hours
// when they divide an hour or a day, else an example.
func everyHint(e string) string {
	d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(e, "@every")))
	switch {
	case err != nil || d <= 0 || d%time.Minute != 0:
	case d < time.Hour && time.Hour%d == 0:
		return fmt.Sprintf("*/%d * * * *", d/time.Minute)
	case d == time.Hour:
		return "0 * * * *"
	case d%time.Hour == 0 && 24*time.Hour%d == 0:
		return fmt.Sprintf("0 */%d * * *", d/time.Hour)
	}
	return "*/30 * * * *"
}

// Zone loads an IANA time zone by name ("" and "UTC" are UTC). It refuses
// "Local", which would depend on the server's host.
func Zone(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, errors.New("timezone Local depends on the server's host; name an IANA zone such as Europe/Berlin, or leave it out for UTC")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("timezone %q is not an IANA time zone name (such as UTC, Europe/Berlin, America/New_York)", name)
	}
	return loc, nil
}

// String is the expression as parsed.
func (s *Spec) String() string { return s.expr }

// Next returns the first due time strictly after t, in UTC; the zero time
// when there is none within five years. The fields are read as wall-clock
// times of the spec's zone (robfig/cron's rule): a time that a
// spring-forward change skips (02:30 on the day Europe/Berlin goes from
// 02:00 to 03:00) is not due that day, and a time that a fall-back change
// repeats (02:30 on the day it goes from 03:00 back to 02:00) is due at
// both instants, an hour apart. UTC has neither.
func (s *Spec) Next(t time.Time) time.Time {
	n := s.s.Next(t.In(s.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// maxSteps bounds Latest's walk: a year of a schedule due every minute.
const maxSteps = 366 * 24 * 60

// Latest returns the latest due time in [from, now], where from is a due
// time (a schedule's stored next time), and how many due times before it
// in that span were passed over (missed: a downtime). ok is false when
// from is after now. Past maxSteps due times it jumps to the latest due
// time found from a day before now, counting what it skipped as missed
// only roughly (at least maxSteps).
func (s *Spec) Latest(from, now time.Time) (due time.Time, missed int, ok bool) {
	if from.After(now) {
		return time.Time{}, 0, false
	}
	due = from.UTC()
	for steps := 0; ; steps++ {
		if steps == maxSteps {
			return s.latestNear(due, now, missed)
		}
		n := s.Next(due)
		if n.IsZero() || n.After(now) {
			return due, missed, true
		}
		due = n
		missed++
	}
}

// latestNear finishes Latest's walk from a day before now (or from due,
// the latest found so far, when no time falls in that day).
func (s *Spec) latestNear(due, now time.Time, missed int) (time.Time, int, bool) {
	if d := s.Next(now.Add(-24 * time.Hour)); !d.IsZero() && !d.After(now) && d.After(due) {
		due = d
	}
	for {
		n := s.Next(due)
		if n.IsZero() || n.After(now) {
			return due, missed, true
		}
		due = n
		missed++
	}
}

// MinInterval returns the shortest time between two consecutive due
// times in the calendar year after from (both after from and before
// from.AddDate(1, 0, 0); at most 10,000 due times looked at), or 0 when
// it is due at most once in that year (@yearly). A server compares it
// with its limit (knotless-server --schedule-min-interval). A wall-clock
// time that a fall-back change of a zone repeats is due twice, an hour
// apart (see Next), so "30 2 * * *" in Europe/Berlin has 1h.
func (s *Spec) MinInterval(from time.Time) time.Duration {
	end := from.AddDate(1, 0, 0)
	prev := s.Next(from)
	var least time.Duration
	for i := 0; i < 10000 && !prev.IsZero() && prev.Before(end); i++ {
		n := s.Next(prev)
		if n.IsZero() || !n.Before(end) {
			break
		}
		if gap := n.Sub(prev); least == 0 || gap < least {
			least = gap
		}
		prev = n
	}
	return least
}
