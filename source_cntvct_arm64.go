//go:build gc && !purego

package schedclock

import "github.com/schedclock/schedclock/internal/errata"

// This build reads CNTVCT_EL0 in assembly: see source_readers.go.
const asmBuild = true

var asm = asmReaders{cntvct: readCNTVCT, cntfrq: readCNTFRQ, cntvctErratum: cntvctErratumRead}

// readCNTVCT reads the virtual counter after every earlier load (ISB) and
// orders every later load after it, so a counter value is neither older
// than the latch bank it is combined with nor newer than the seq re-check
// that validates that bank.
func readCNTVCT() uint64

// readCNTFRQ reads CNTFRQ_EL0, the counter frequency in Hz as firmware
// programmed it.
func readCNTFRQ() uint64

// cntvctErratumRead returns the read of CNTVCT_EL0 to use under e: the
// kernel's workaround sequence (internal/errata) on the ordered
// readCNTVCT, or readCNTVCT itself when e is errata.None. Each is a
// function of its own rather than a closure, so that a Clock's read path
// calls it directly and the workaround's loop is inlined into it.
func cntvctErratumRead(e errata.Erratum) func() uint64 {
	switch e {
	case errata.FSLA008585:
		return readCNTVCTFSLA008585
	case errata.HiSilicon161010101:
		return readCNTVCTHiSilicon161010101
	case errata.ARM858921:
		return readCNTVCTARM858921
	case errata.Sun50iUnknown1:
		return readCNTVCTSun50iUnknown1
	}
	return readCNTVCT
}

func readCNTVCTFSLA008585() uint64 { return errata.FSLA008585Read(readCNTVCT) }

func readCNTVCTHiSilicon161010101() uint64 { return errata.HiSilicon161010101Read(readCNTVCT) }

func readCNTVCTARM858921() uint64 { return errata.ARM858921Read(readCNTVCT) }

func readCNTVCTSun50iUnknown1() uint64 { return errata.Sun50iUnknown1Read(readCNTVCT) }
