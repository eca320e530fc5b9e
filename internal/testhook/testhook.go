// Package testhook links package schedclocktest to the root package's
// manual counter, which the root does not export: a Clock on it answers
// exactly (Coarse is Now, wall time from a fixed origin, every wrap
// folded), so the counter lives beside the Clock, and schedclocktest
// reaches it through the variable the root sets here at initialisation.
package testhook

// Manual is the root package's manual counter, as schedclocktest uses
// it. Its methods take no time.Time or time.Duration: a type reachable
// through an interface keeps its methods linked, and time.Time's String
// would link the time zone loader into every program that imports the
// root package.
type Manual interface {
	Advance(ns int64)
	Set(v uint64)
	Read() uint64
	SetWallOrigin(sec int64, nsec int64)
	// Source returns the counter's schedclock.Source, as an any: this
	// package cannot name the root's types.
	Source() any
}

// NewManual makes a manual counter (the root's newManual); the root
// package sets it.
var NewManual func(rate uint64, bits int) (Manual, error)
