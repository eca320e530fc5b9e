//go:build gc && !purego

package schedclock

// cntvctSupported reports whether this build has the CNTVCT assembly.
const cntvctSupported = true

// readCNTVCT reads the virtual counter after every earlier load (ISB) and
// orders every later load after it, so a counter value is neither older
// than the latch bank it is combined with nor newer than the seq re-check
// that validates that bank.
func readCNTVCT() uint64

// readCNTFRQ reads CNTFRQ_EL0, the counter frequency in Hz as firmware
// programmed it.
func readCNTFRQ() uint64

func cntvctReader() func() uint64 { return readCNTVCT }

func cntfrq() uint64 { return readCNTFRQ() }

func cntvctUnsupportedReason() string { return "" }
