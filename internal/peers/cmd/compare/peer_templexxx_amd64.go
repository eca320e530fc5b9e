package main

import (
	"fmt"

	"github.com/templexxx/tsc"
)

// templexxxTSC is github.com/templexxx/tsc v0.0.3, the newest version the
// module proxy reachable here serves (v0.0.1 to v0.0.3; later tags, master
// and @latest answer 403). Its UnixNano reads the TSC only
// where the package enabled it in init; otherwise it is
// time.Now().UnixNano(), and the note says so.
func templexxxTSC() clock {
	return clock{
		name: "templexxx/tsc.UnixNano",
		pkgs: []string{"github.com/templexxx/tsc", "github.com/templexxx/cpu"},
		open: fixed(tsc.UnixNano),
		note: func() string {
			const served = "; the module proxy reachable here serves only v0.0.1 to v0.0.3 of it (later tags and master: 403), and its master differs (see the features table)"
			if tsc.Enabled() {
				return fmt.Sprintf("templexxx/tsc v0.0.3: TSC enabled (frequency from %q); UnixNano is RDTSC without a fence, times a float64 coefficient, plus an offset", tsc.FreqSource) + served
			}
			return fmt.Sprintf("templexxx/tsc v0.0.3: TSC not enabled here (Supported() = %v; it needs an Intel CPU whose CPUID leaf 0x15 gives the TSC frequency), so UnixNano is its fallback, time.Now().UnixNano()", tsc.Supported()) + served
		},
	}
}
