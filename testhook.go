package schedclock

import (
	"time"

	"github.com/schedclock/schedclock/internal/testhook"
)

// The manual counter is schedclocktest's to export: it reaches it through
// internal/testhook, so that nothing test-only is in this package's API.
func init() {
	testhook.NewManual = func(rate uint64, bits int) (testhook.Manual, error) {
		m, err := newManual(rate, bits)
		if err != nil {
			return nil, err
		}
		return manualLink{m}, nil
	}
}

// manualLink is a manual counter as testhook.Manual: plain integers for
// durations and times, its Source as an any.
type manualLink struct{ m *manual }

func (l manualLink) Advance(ns int64)              { l.m.Advance(time.Duration(ns)) }
func (l manualLink) Set(v uint64)                  { l.m.Set(v) }
func (l manualLink) Read() uint64                  { return l.m.Read() }
func (l manualLink) SetWallOrigin(sec, nsec int64) { l.m.SetWallOrigin(time.Unix(sec, nsec)) }
func (l manualLink) Source() any                   { return l.m.Source() }
