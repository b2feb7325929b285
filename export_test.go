package sluice

import "time"

// SetWaitSleep replaces l's Wait sleep: f is called with each duration Wait
// would sleep, and returns the channel Wait waits on and its stop function.
func SetWaitSleep(l *Limiter, f func(time.Duration) (<-chan time.Time, func() bool)) {
	l.after = f
}
