package sqlstore

import (
	"context"
	"errors"
	"time"

	"knotless.dev/knotless/internal/store"
)

// Scheduled runs (issue 38): placeholders until the tables land.

var errNoSchedules = errors.New("schedules are not stored yet")

func (d *DB) SyncSchedules(ctx context.Context, repoID int64, want []store.NewSchedule) ([]store.Schedule, error) {
	return nil, errNoSchedules
}

func (d *DB) Schedules(ctx context.Context, repoID int64) ([]store.Schedule, error) {
	return nil, errNoSchedules
}

func (d *DB) Schedule(ctx context.Context, id int64) (store.Schedule, error) {
	return store.Schedule{}, errNoSchedules
}

func (d *DB) DueSchedules(ctx context.Context, now time.Time, limit int) ([]store.Schedule, error) {
	return nil, errNoSchedules
}

func (d *DB) NextScheduleAt(ctx context.Context) (time.Time, bool, error) {
	return time.Time{}, false, errNoSchedules
}

func (d *DB) SkipSchedule(ctx context.Context, id int64, expected, next time.Time, problem string) (bool, error) {
	return false, errNoSchedules
}

func (d *DB) PauseSchedule(ctx context.Context, id int64, paused bool, by string, at, next time.Time) (store.Schedule, error) {
	return store.Schedule{}, errNoSchedules
}
