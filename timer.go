package schedclock

import "time"

// wakeTimer is what Coarse's ticker and sleepUnlessClosed wait on (the
// background loop's timer kicks it instead): a time.Timer whose
// firing is a send on a channel of struct{}. time.NewTimer and
// time.NewTicker hand their chan time.Time to the runtime as an
// interface, and that keeps time.Time's String and GoString, and with
// them time's formatting and its time zone loader, in every binary that
// imports the package (see TestWeight). A firing
// that Reset or Stop could not stop in time may still arrive once: the
// goroutines take a wake-up for a look at their schedule, never for a
// deadline met.
type wakeTimer struct {
	t *time.Timer
	C chan struct{}
}

// newWakeTimer returns a wakeTimer that fires after d.
func newWakeTimer(d time.Duration) *wakeTimer {
	w := &wakeTimer{C: make(chan struct{}, 1)}
	w.t = time.AfterFunc(d, w.fire)
	return w
}

func (w *wakeTimer) fire() {
	select {
	case w.C <- struct{}{}:
	default:
	}
}

// Reset makes the timer fire d from now, dropping a firing not received.
func (w *wakeTimer) Reset(d time.Duration) {
	w.t.Stop()
	select {
	case <-w.C:
	default:
	}
	w.t.Reset(d)
}

// Stop stops the timer.
func (w *wakeTimer) Stop() { w.t.Stop() }
