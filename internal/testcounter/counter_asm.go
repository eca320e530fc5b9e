//go:build (amd64 || arm64) && gc && !purego

package testcounter

// Supported reports whether this build has the readers below.
const Supported = true

// ReadUnfenced reads the hardware counter (the TSC on amd64,
// CNTVCT_EL0 on arm64) with no ordering at all. It exists only so that
// the ordering tests can show they detect a missing fence.
func ReadUnfenced() uint64

// ReadSerialized reads the same counter ordered both ways: after
// every earlier instruction and before every later one. The ordering
// tests take their reference readings (the brackets around a reading, the
// writer's counter values around a publication) with it, so that they do
// not depend on the readers they test.
func ReadSerialized() uint64
