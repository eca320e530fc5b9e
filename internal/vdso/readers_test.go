package vdso_test

import (
	"time"

	"github.com/schedclock/schedclock/internal/vdso"
)

// churnDuration is how long the profile and signal tests load the clock.
const churnDuration = 2 * time.Second

// readInOrder reads c until stop, at varying stack depths, and counts
// the readings that went backwards.
type readInOrder struct {
	c                 *vdso.Clock
	reads, inversions int64
	prev              int64
}

func (r *readInOrder) batch() {
	for range 256 {
		now := r.c.Now()
		if now < r.prev {
			r.inversions++
		}
		r.prev = now
	}
	r.reads += 256
}
