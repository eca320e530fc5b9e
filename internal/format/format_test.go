package format

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestNs checks each unit, its boundaries and the three significant
// digits against values written out by hand.
func TestNs(t *testing.T) {
	for ns, want := range map[float64]string{
		0:        "0 ns",
		12:       "12 ns",
		999:      "999 ns",
		999.94:   "1e+03 ns", // three digits round up, the unit does not
		1000:     "1 µs",
		1500:     "1.5 µs",
		123456:   "123 µs",
		1e6:      "1 ms",
		2.5e6:    "2.5 ms",
		1e9:      "1 s",
		1.6e9:    "1.6 s",
		3.1416e9: "3.14 s",
		7200e9:   "7.2e+03 s",
	} {
		assert.Equal(t, want, Ns(ns), "Ns(%v)", ns)
	}
}
