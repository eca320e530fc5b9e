//go:build linux

package schedclock_test

import (
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/schedclock/schedclock"
)

func gettime(t *testing.T, id int32) uint64 {
	var ts unix.Timespec
	require.NoError(t, unix.ClockGettime(id, &ts))
	return uint64(ts.Nano())
}

// Raw and Boottime read inside the bracket of two clock_gettime system
// calls of the same clock, 2000 times in a row, and say which path.
func TestRawAndBoottimeInsideTheSystemCallsBracket(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func() (schedclock.Source, error)
		id   int32
	}{{"CLOCK_MONOTONIC_RAW", schedclock.Raw, unix.CLOCK_MONOTONIC_RAW}, {"CLOCK_BOOTTIME", schedclock.Boottime, unix.CLOCK_BOOTTIME}} {
		src, err := tc.make()
		require.NoError(t, err, tc.name)
		assert.True(t, strings.HasPrefix(src.Name, tc.name+" ("), "Name %q names the clock and its path", src.Name)
		assert.Regexp(t, `vDSO|system call`, src.Name)
		t.Logf("%s", src.Name)
		assert.Equal(t, uint64(1e9), src.Rate)
		assert.Equal(t, 64, src.Bits)
		for i := 0; i < 2000; i++ {
			lo := gettime(t, tc.id)
			v := src.Read()
			hi := gettime(t, tc.id)
			require.True(t, lo <= v && v <= hi, "%s read %d: %d outside [%d, %d]", tc.name, i, v, lo, hi)
		}
	}
}

// A Clock on Boottime never goes back, read by four goroutines while its
// writer updates it.
func TestClockOnBoottimeNeverGoesBack(t *testing.T) {
	src, err := schedclock.Boottime()
	require.NoError(t, err)
	c, err := schedclock.New(src)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, src.Name, c.Info().Source, "Info names the path in use")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan string, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := c.Now()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				now := c.Now()
				if now < last {
					errs <- "went back"
					return
				}
				last = now
				if i%4096 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	for i := 0; i < 200; i++ {
		require.NoError(t, c.Update())
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}
