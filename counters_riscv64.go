package schedclock

// counters: see counter.go.
var counters = []*counter{&rdtimeCounter}

// hardware is Hardware here: the riscv64 counter register.
func hardware() (Source, error) { return rdtimeTimer.source() }
