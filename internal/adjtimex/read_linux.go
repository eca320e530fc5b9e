//go:build linux

package adjtimex

import (
	"golang.org/x/sys/unix"

	"github.com/schedclock/schedclock/internal/format"
)

// Read calls adjtimex with modes 0: it changes nothing, needs no
// privilege.
func Read() (Reading, error) {
	var tx unix.Timex
	state, err := unix.Adjtimex(&tx)
	if err != nil {
		return Reading{}, format.Errorf("%w: %v", ErrUnsupported, err)
	}
	return Reading{
		MaxErrorUs: int64(tx.Maxerror), EstErrorUs: int64(tx.Esterror), Status: tx.Status, State: state,
		Freq: int64(tx.Freq), Tick: int64(tx.Tick), Offset: int64(tx.Offset),
	}, nil
}
