//go:build !(linux || darwin || dragonfly || freebsd || openbsd || solaris)

package schedclock

import "time"

// syscallRealtime is time.Now where there is no CLOCK_REALTIME to read
// directly (as realWallNow falls back to it): no unix, or a unix whose
// x/sys lacks it (netbsd, aix).
func syscallRealtime() time.Time { return time.Now() }
