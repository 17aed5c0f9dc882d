package server

// SetScheduleFireHook makes every firing call f with the schedule's id
// right before it creates the pipeline; nil removes it.
func SetScheduleFireHook(f func(id int64)) {
	if f == nil {
		scheduleFireHook.Store(nil)
		return
	}
	scheduleFireHook.Store(&f)
}
