// Package testcounter reads the hardware counter (the TSC on amd64,
// CNTVCT_EL0 on arm64) in the ways the clock never does, for the tests
// that check the clock's readers against it: with no ordering at all, so
// that the ordering tests can show they catch a missing fence, and fully
// serialized, so that their reference readings do not depend on the
// readers they test.
package testcounter
