package schedclock

// counters: see counter.go.
var counters = []*counter{&stableCounterCounter}

// hardware is Hardware here: the loong64 counter register.
func hardware() (Source, error) { return stableCounterTimer.source() }
