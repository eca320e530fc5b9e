// Package testcounter reads the hardware counter (the TSC on amd64,
// CNTVCT_EL0 on arm64) in the ways the clock never does, for the root
// package's tests and benchmarks: with no ordering at all, so that the
// ordering tests can show they catch a missing fence; fully serialized,
// so that their reference readings do not depend on the readers they
// test; and with RDTSCP, which BenchmarkRDTSCP compares with the clock's
// LFENCE; RDTSC.
package testcounter
