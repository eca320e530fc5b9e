package schedclock

// defaultClock is the package's clock, started at package initialisation
// on a source that is ready at once.
var defaultClock = newDefaultClock()

func newDefaultClock() *Clock {
	c, err := newClock(Portable(), RateDeclared, 0)
	if err != nil {
		panic("schedclock: the portable source is invalid: " + err.Error())
	}
	return c
}

// Now returns the default clock's time in nanoseconds: Default().Now().
func Now() int64 { return defaultClock.Now() }

// Default returns the package's default clock.
func Default() *Clock { return defaultClock }
