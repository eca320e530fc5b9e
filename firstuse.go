package schedclock

// warmFirstCalls runs, once at initialisation, the code of the default
// clock's first calls (Now, Since, Coarse, Time, Info and the first
// use's wake) on a clock of its own that nothing starts or keeps: a
// first call then finds that code, and the heap classes it allocates
// from, in memory. In a virtual machine each page of code a process
// touches for the first time costs a fault of 30-40µs (measured on the
// development machine's KVM guest: a first Now cost 35-60µs in a test
// binary, 11-21µs with its pages touched before), which would otherwise
// fall on the first log line or request. It costs the import a few such
// faults and one system call (the provisional wall map's).
func warmFirstCalls() {
	read := readMono
	c, err := newClock(Source{Name: "warm-up", Read: func() uint64 { return read() }, Bits: 63, Rate: 1_000_000_000}, rating{hz: 1e9, origin: RateDeclared}, nil)
	if err != nil {
		return
	}
	c.Time(int64(c.Since(c.Coarse())))
	_ = c.Info()
	(&trustPolicy{}).wakeFirstUse()
}
