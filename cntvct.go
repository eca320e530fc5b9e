package schedclock

import "fmt"

// cntvctBits is the counter width the architecture guarantees: at least
// 56 bits before Armv8.6, 64 from it. Masking a 64-bit counter to 56 bits
// still gives a consistent 56-bit counter, so 56 is right everywhere.
const cntvctBits = 56

// cntfrqErrPPM is the error reported for the rate in CNTFRQ_EL0: firmware
// programs the nominal oscillator frequency, and the oscillator sits some
// tens of ppm from it. The rate is refined in the background anyway.
const cntfrqErrPPM = 50

// CNTVCT returns the arm64 virtual counter CNTVCT_EL0 as a Source, read
// with ISB before it and an ordering load after it. Its Rate is the
// frequency in CNTFRQ_EL0; it never blocks.
//
// Off arm64, in a purego or non-gc build, err wraps ErrUnsupported; where
// CNTFRQ_EL0 reads 0 (firmware left it unprogrammed) err wraps
// ErrUntrusted. The message says exactly why.
func CNTVCT() (Source, error) {
	src, _, _, err := probeCNTVCT()
	return src, err
}

// probeCNTVCT is CNTVCT with the origin and error of its rate.
func probeCNTVCT() (src Source, origin RateOrigin, errPPM float64, err error) {
	if !cntvctSupported {
		return Source{}, 0, 0, fmt.Errorf("%w %q: %s", ErrUnsupported, "cntvct", cntvctUnsupportedReason())
	}
	// CNTFRQ_EL0 bits 63:32 are RES0.
	rate := cntfrq() & 0xffff_ffff
	if rate == 0 {
		return Source{}, 0, 0, fmt.Errorf("%w %q: CNTFRQ_EL0 reads 0 (firmware did not program the counter frequency)", ErrUntrusted, "cntvct")
	}
	return Source{Name: "cntvct", Read: cntvctReader(), Bits: cntvctBits, Rate: rate}, RateCNTFRQ, cntfrqErrPPM, nil
}
