//go:build gc && !purego

package schedclock

// cntvctErratumReader returns the read of CNTVCT_EL0 to use under e: the
// kernel's workaround sequence (cntvct_errata.go) on the ordered
// readCNTVCT, or readCNTVCT itself when e is erratumNone. Each is a
// function of its own rather than a closure, so that a Clock's read path
// calls it directly.
func cntvctErratumReader(e cntvctErratum) func() uint64 {
	switch e {
	case erratumFSLA008585:
		return readCNTVCTFSLA008585
	case erratumHiSilicon161010101:
		return readCNTVCTHiSilicon161010101
	case erratumARM858921:
		return readCNTVCTARM858921
	case erratumSun50iUnknown1:
		return readCNTVCTSun50iUnknown1
	}
	return readCNTVCT
}

func readCNTVCTFSLA008585() uint64 { return fslA008585Read(readCNTVCT) }

func readCNTVCTHiSilicon161010101() uint64 { return hisi161010101Read(readCNTVCT) }

func readCNTVCTARM858921() uint64 { return arm858921Read(readCNTVCT) }

func readCNTVCTSun50iUnknown1() uint64 { return sun50iUnknown1Read(readCNTVCT) }
