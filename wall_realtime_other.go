//go:build !unix

package schedclock

import "time"

// syscallRealtime is time.Now where there is no CLOCK_REALTIME to read
// directly (as realWallNow falls back to it).
func syscallRealtime() time.Time { return time.Now() }
