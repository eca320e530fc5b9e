package schedclock

// counters: see counter.go.
var counters = []*counter{&tscCounter, &pvclockCounter}
