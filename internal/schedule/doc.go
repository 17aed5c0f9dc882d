// Package schedule reads the cron expressions of a workflow's
// `on.schedule` and answers when they are due: the next time after a
// moment, the latest time a downtime missed, and the shortest gap between
// two times. Parsing is robfig/cron's standard five-field parser with the
// @daily-style names; time zones are IANA names read with time.LoadLocation
// (the binaries embed time/tzdata, so a host without zoneinfo reads them
// too).
package schedule
