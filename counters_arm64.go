package schedclock

// counters: see counter.go.
var counters = []*counter{&cntvctCounter}

// hardware is Hardware here: the arm64 counter register.
func hardware() (Source, error) { return cntvctSource() }
