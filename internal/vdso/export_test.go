package vdso

// SyscallClock returns a copy of c that reads the clock through the
// system call: the fallback path, forced, to compare with the vDSO's.
func SyscallClock(c *Clock) *Clock {
	d := *c
	d.entry, d.path = 0, "system call (forced by the test)"
	return &d
}

// RuntimeSeesVDSOPage says whether the runtime's inVDSOPage covers this
// process's vDSO (see runtimeSeesVDSOPage).
func RuntimeSeesVDSOPage() bool { return runtimeSeesVDSOPage() }
