package schedclock

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// assertReasoned checks that err wraps ErrUnsupported or ErrUntrusted and
// says more than the sentinel does.
func assertReasoned(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	var sentinel error
	switch {
	case errors.Is(err, ErrUnsupported):
		sentinel = ErrUnsupported
	case errors.Is(err, ErrUntrusted):
		sentinel = ErrUntrusted
	default:
		t.Fatalf("error %q wraps neither ErrUnsupported nor ErrUntrusted", err)
	}
	// The reason follows the sentinel and the counter's name:
	// `schedclock: counter not trusted "tsc": reason`.
	reason := strings.TrimPrefix(err.Error(), sentinel.Error())
	if i := strings.Index(reason, ": "); i >= 0 {
		reason = reason[i+len(": "):]
	} else {
		reason = ""
	}
	assert.NotEmpty(t, strings.TrimSpace(reason), "error %q gives no reason", err)
}

// assertCounts reads src many times on one thread and checks that it
// never goes backwards and does advance.
func assertCounts(t *testing.T, src Source) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mask := ^uint64(0) >> (64 - src.Bits)
	first := src.Read() & mask
	prev := first
	for i := 0; i < 200_000; i++ {
		now := src.Read() & mask
		if now < prev {
			t.Fatalf("%s went backwards on one thread: %d after %d (read %d)", src.Name, now, prev, i)
		}
		prev = now
	}
	time.Sleep(time.Millisecond)
	assert.Greater(t, src.Read()&mask, first, "%s did not advance in 1 ms", src.Name)
}

// assertRateAgrees measures src against the reference clock and checks
// that its declared Rate agrees within 500 ppm plus the stated errors.
func assertRateAgrees(t *testing.T, src Source, errPPM float64) {
	t.Helper()
	hz, measureErrPPM, err := measureRate(src.Read, 50*time.Millisecond)
	require.NoError(t, err)
	offPPM := (hz - float64(src.Rate)) / float64(src.Rate) * 1e6
	t.Logf("%s: rate %d Hz, measured %.0f Hz (%+.2f ppm, measurement ±%.2f ppm, source ±%.2f ppm)",
		src.Name, src.Rate, hz, offPPM, measureErrPPM, errPPM)
	assert.InDelta(t, 0, offPPM, 500+measureErrPPM+errPPM, "%s rate disagrees with %s", src.Name, rawClockName)
}

func TestProbeHardware(t *testing.T) {
	src, origin, errPPM, err := probeHardware()
	if err != nil {
		t.Logf("no hardware counter: %v", err)
		assertReasoned(t, err)
		return
	}
	t.Logf("hardware counter %q, %d bits, %d Hz (%v, ±%.2f ppm)", src.Name, src.Bits, src.Rate, origin, errPPM)
	require.NotNil(t, src.Read)
	assert.Contains(t, []string{"tsc", "cntvct"}, src.Name)
	assert.GreaterOrEqual(t, src.Bits, 56)
	assertCounts(t, src)
	if origin == RateMeasured {
		assert.Zero(t, src.Rate, "probeHardware must not measure")
		return
	}
	require.NotZero(t, src.Rate)
	assert.NoError(t, src.validate())
	assertRateAgrees(t, src, errPPM)
}

func TestTSC(t *testing.T) {
	src, err := TSC()
	if !tscSupported {
		require.ErrorIs(t, err, ErrUnsupported)
		assert.Contains(t, err.Error(), tscUnsupportedReason())
		if runtime.GOARCH == "amd64" && runtime.Compiler == "gc" {
			assert.Contains(t, err.Error(), "purego")
		} else {
			assert.Contains(t, err.Error(), "not amd64")
		}
		_, _, _, err = probeTSC()
		assert.ErrorIs(t, err, ErrUnsupported)
		return
	}
	if err != nil {
		// A real machine may lack an invariant TSC or the kernel may
		// distrust it; the error must say which.
		t.Logf("TSC rejected: %v", err)
		assertReasoned(t, err)
		_, _, _, probeErr := probeTSC()
		assert.EqualError(t, probeErr, err.Error())
		return
	}
	assert.Equal(t, "tsc", src.Name)
	assert.Equal(t, 64, src.Bits)
	require.NoError(t, src.validate())
	assertCounts(t, src)
	_, origin, errPPM, err := probeTSC()
	require.NoError(t, err)
	if origin == RateMeasured {
		errPPM = 0 // TSC's own measurement: compare against a second one
	}
	assertRateAgrees(t, src, errPPM)
}

// TestHostCPUID checks the CPUID wiring: arguments in, four registers out.
func TestHostCPUID(t *testing.T) {
	if !tscSupported {
		a, b, c, d := hostCPUID(0, 0)
		assert.Equal(t, [4]uint32{}, [4]uint32{a, b, c, d}, "no CPUID in this build")
		return
	}
	maxBasic, _, _, _ := hostCPUID(0, 0)
	require.GreaterOrEqual(t, maxBasic, uint32(1))
	_, _, _, featEDX := hostCPUID(1, 0)
	assert.NotZero(t, featEDX&featEDXTSC, "every amd64 CPU has a TSC")
	maxExtended, _, _, _ := hostCPUID(0x80000000, 0)
	assert.GreaterOrEqual(t, maxExtended, uint32(0x80000001), "every amd64 CPU has the long-mode leaf")
	// Leaf 0xB echoes the sub-leaf in ECX bits 7:0, which proves ECX is
	// passed.
	if maxBasic >= 0xb {
		if _, ebx, _, _ := hostCPUID(0xb, 0); ebx != 0 {
			_, _, ecx, _ := hostCPUID(0xb, 1)
			assert.Equal(t, uint32(1), ecx&0xff, "CPUID(0xb, 1) did not see sub-leaf 1")
		}
	}
}

func TestCNTVCT(t *testing.T) {
	src, err := CNTVCT()
	if !cntvctSupported {
		require.ErrorIs(t, err, ErrUnsupported)
		assert.Contains(t, err.Error(), cntvctUnsupportedReason())
		if runtime.GOARCH == "arm64" && runtime.Compiler == "gc" {
			assert.Contains(t, err.Error(), "purego")
		} else {
			assert.Contains(t, err.Error(), "not arm64")
		}
		return
	}
	// Every arm64 Linux system, qemu-user included, programs CNTFRQ_EL0.
	require.NoError(t, err)
	assert.Equal(t, "cntvct", src.Name)
	assert.Equal(t, 56, src.Bits)
	require.NoError(t, src.validate())
	_, origin, errPPM, err := probeCNTVCT()
	require.NoError(t, err)
	assert.Equal(t, RateCNTFRQ, origin)
	assertCounts(t, src)
	assertRateAgrees(t, src, errPPM)
}

func TestProbeHardwareOnThisArch(t *testing.T) {
	_, _, _, err := probeHardware()
	switch runtime.GOARCH {
	case "amd64":
		_, _, _, tscErr := probeTSC()
		assert.Equal(t, tscErr, err)
	case "arm64":
		_, _, _, cntvctErr := probeCNTVCT()
		assert.Equal(t, cntvctErr, err)
	default:
		require.ErrorIs(t, err, ErrUnsupported)
		assert.Contains(t, err.Error(), runtime.GOARCH)
	}
}

func TestReadClocksource(t *testing.T) {
	content, err := os.ReadFile(clocksourcePath)
	if err != nil {
		assert.Empty(t, readClocksource())
		return
	}
	want := strings.TrimSpace(string(content))
	require.NotEmpty(t, want)
	assert.Equal(t, want, readClocksource())
}
