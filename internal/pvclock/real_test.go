package pvclock

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// realPage finds and probes this machine's pvclock page, or skips the
// test, saying why, where the machine has none (bare metal, a kernel not
// on a paravirtual clock, qemu-user, another OS or arch).
func realPage(t *testing.T) (*Page, Pvclock, Location) {
	if !Supported {
		t.Skip("no TSC reader in this build")
	}
	maps, err := Maps()
	if errors.Is(err, ErrNoPage) {
		t.Skip(err.Error())
	}
	require.NoError(t, err)
	loc, err := Locate(maps, KernelRelease())
	if errors.Is(err, ErrNoPage) {
		t.Skip(err.Error())
	}
	require.NoError(t, err, "a layout this package does not know")
	pg, p, err := ProbePvclock(loc.Pvclock)
	if errors.Is(err, ErrNoPage) {
		t.Skip(err.Error())
	}
	require.NoError(t, err)
	return pg, p, loc
}

// TestProbeRefusesAnUnmappedPage: the probe of a page the kernel has not
// mapped returns ErrNoPage instead of killing the process. The Hyper-V
// page of a KVM guest is such a page; elsewhere, the page after the
// [vvar_vclock] mapping's end is.
func TestProbeRefusesAnUnmappedPage(t *testing.T) {
	_, _, loc := realPage(t)
	_, _, err := ProbeHyperv(loc.Hyperv)
	if err == nil {
		t.Skip("this machine's Hyper-V page is mapped: a Hyper-V guest")
	}
	assert.ErrorIs(t, err, ErrNoPage)
	_, _, err = ProbePvclock(0) // page zero: never mapped
	assert.ErrorIs(t, err, ErrNoPage)
}

// offsetBracket is what one reading says about the offset of the page's
// time from CLOCK_MONOTONIC_RAW: it lies in [lo, hi].
type offsetBracket struct {
	lo, hi int64
	at     int64 // CLOCK_MONOTONIC_RAW at the reading
}
