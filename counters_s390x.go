package schedclock

// counters: see counter.go.
var counters = []*counter{&todCounter}

// hardware is Hardware here: the s390x counter register.
func hardware() (Source, error) { return todTimer.source() }
