package schedclock

// counters: see counter.go.
var counters = []*counter{&tscCounter, &pvclockCounter}

// hardware is Hardware here: the amd64 counter register.
func hardware() (Source, error) { return tscSource() }
