package schedclock

// counters: see counter.go.
var counters = []*counter{&timebaseCounter}

// hardware is Hardware here: the ppc64le counter register.
func hardware() (Source, error) { return timebaseTimer.source() }
