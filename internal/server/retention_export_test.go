package server

// SetRetentionHook makes every retention pass that takes the lock call f
// with true, and with false before it lets the lock go; nil removes it.
func SetRetentionHook(f func(holding bool)) {
	if f == nil {
		retentionHook.Store(nil)
		return
	}
	retentionHook.Store(&f)
}
