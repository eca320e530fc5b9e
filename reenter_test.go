package schedclock_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock"
)

// reenterTimeout is how long a writer call may take before the test
// calls it hung: the writer waiting for its own lock.
const reenterTimeout = 10 * time.Second

// TestAReadReenteringTheWriter: a Source's Read that calls a writer
// method (Update, Register, Suspend, Resume, Close) of the very clock
// whose writer is running it gets an error, ErrReentered, instead of
// waiting forever for the lock its own goroutine holds; the writer that
// called the Read completes, and the clock goes on, its lock free. Each
// writer path that reads the counter is tried: Update, Suspend, Resume,
// and Register with the new Source's Read re-entering.
func TestAReadReenteringTheWriter(t *testing.T) {
	nested := map[string]func(c *schedclock.Clock) error{
		"Update":   (*schedclock.Clock).Update,
		"Suspend":  (*schedclock.Clock).Suspend,
		"Resume":   (*schedclock.Clock).Resume,
		"Register": func(c *schedclock.Clock) error { return c.Register(schedclock.Portable()) },
		"Close":    (*schedclock.Clock).Close,
	}
	type outer struct {
		name string
		// call arms the Read (arm) and makes the writer call; src is a
		// Source whose Read re-enters once armed.
		call func(c *schedclock.Clock, src schedclock.Source, arm func()) error
		// onSrc says the clock runs on src (otherwise on a plain Manual,
		// and call registers src).
		onSrc bool
	}
	outers := []outer{
		{"Update", func(c *schedclock.Clock, _ schedclock.Source, arm func()) error { arm(); return c.Update() }, true},
		{"Suspend", func(c *schedclock.Clock, _ schedclock.Source, arm func()) error { arm(); return c.Suspend() }, true},
		{"Resume", func(c *schedclock.Clock, _ schedclock.Source, arm func()) error {
			if err := c.Suspend(); err != nil {
				return err
			}
			arm()
			return c.Resume()
		}, true},
		{"Register", func(c *schedclock.Clock, src schedclock.Source, arm func()) error { arm(); return c.Register(src) }, false},
	}
	for _, o := range outers {
		for name, call := range nested {
			t.Run(o.name+"/"+name, func(t *testing.T) {
				m := mustManual(1e9, 64)
				var c *schedclock.Clock
				var armed atomic.Bool
				nestedErr := make(chan error, 1)
				src := schedclock.Source{Name: "re-entering", Bits: 64, Rate: 1e9, Read: func() uint64 {
					if armed.CompareAndSwap(true, false) {
						nestedErr <- call(c)
					}
					return m.Read()
				}}
				var err error
				if o.onSrc {
					c, err = schedclock.New(src)
				} else {
					c, err = schedclock.New(m.Source())
				}
				require.NoError(t, err)
				m.Advance(time.Second)
				done := make(chan error, 1)
				go func() { done <- o.call(c, src, func() { armed.Store(true) }) }()
				select {
				case err = <-done:
				case <-time.After(reenterTimeout):
					t.Fatalf("%s, whose Read calls %s: hung for %v (the writer waits for the lock it holds)", o.name, name, reenterTimeout)
				}
				assert.NoError(t, err, "%s itself", o.name)
				require.Len(t, nestedErr, 1, "the Read re-entered")
				nErr := <-nestedErr
				assert.ErrorIs(t, nErr, schedclock.ErrReentered, "%s from the Read of %s", name, o.name)
				// The lock is free: every writer answers.
				before := c.Now()
				if c.Info().Suspended {
					assert.NoError(t, c.Resume())
				}
				assert.NoError(t, c.Update())
				assert.GreaterOrEqual(t, c.Now(), before)
				assert.NoError(t, c.Close())
			})
		}
	}
}

// TestAReferenceReenteringTheWriter: a reference (WithReference) that
// calls the clock's Update from the background goroutine gets an error
// instead of hanging that goroutine for good with the lock held.
func TestAReferenceReenteringTheWriter(t *testing.T) {
	m := mustManual(1e9, 64)
	var c *schedclock.Clock
	var armed atomic.Bool
	nestedErr := make(chan error, 1)
	start := time.Now()
	ref := func() int64 {
		if armed.CompareAndSwap(true, false) {
			nestedErr <- c.Update()
		}
		return int64(time.Since(start))
	}
	c, err := schedclock.New(m.Source(), schedclock.WithReference(ref))
	require.NoError(t, err)
	armed.Store(true)
	select {
	case err = <-nestedErr:
		assert.ErrorIs(t, err, schedclock.ErrReentered)
	case <-time.After(reenterTimeout):
		t.Fatalf("the reference's Update never returned in %v (the background goroutine waits for the lock it holds)", reenterTimeout)
	}
	done := make(chan error, 1)
	go func() { done <- c.Update() }()
	select {
	case err = <-done:
		assert.NoError(t, err)
	case <-time.After(reenterTimeout):
		t.Fatalf("Update hung after the reference re-entered: the lock was left held")
	}
	assert.NoError(t, c.Close())
}

// TestAWriterWaitsForAnotherGoroutinesRead: a writer call from another
// goroutine while the writer is in a slow Read is not a re-entry: it
// waits for the lock and succeeds.
func TestAWriterWaitsForAnotherGoroutinesRead(t *testing.T) {
	m := mustManual(1e9, 64)
	var slow atomic.Bool
	inRead, release := make(chan struct{}), make(chan struct{})
	src := schedclock.Source{Name: "slow", Bits: 64, Rate: 1e9, Read: func() uint64 {
		if slow.CompareAndSwap(true, false) {
			close(inRead)
			<-release
		}
		return m.Read()
	}}
	c, err := schedclock.New(src)
	require.NoError(t, err)
	defer c.Close()
	for _, call := range []func() error{c.Update, c.Suspend, c.Resume, func() error { return c.Register(src) }, c.Close} {
		// A writer that reads the counter, stopped in the Read: Update,
		// or Resume on a suspended clock.
		slow.Store(true)
		first := make(chan error, 1)
		go func() {
			if c.Info().Suspended {
				first <- c.Resume()
			} else {
				first <- c.Update()
			}
		}()
		<-inRead
		second := make(chan error, 1)
		go func() { second <- call() }()
		select {
		case err := <-second:
			t.Fatalf("a writer on another goroutine did not wait for the Read in progress: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		require.NoError(t, <-first)
		require.NoError(t, <-second)
		inRead, release = make(chan struct{}), make(chan struct{})
	}
}

// TestAFormerWriterIsNoHolder: a goroutine that held the writer lock
// before is not taken for its holder afterwards: while Time's first call
// (which takes the lock without naming a holder) is in a slow Read on
// another goroutine, an Update from the goroutine that wrote last waits
// and succeeds instead of failing with ErrReentered.
func TestAFormerWriterIsNoHolder(t *testing.T) {
	m := mustManual(1e9, 64)
	var slow atomic.Bool
	inRead, release := make(chan struct{}), make(chan struct{})
	c, err := schedclock.New(schedclock.Source{Name: "slow", Bits: 64, Rate: 1e9, Read: func() uint64 {
		if slow.CompareAndSwap(true, false) {
			close(inRead)
			<-release
		}
		return m.Read()
	}})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Update()) // this goroutine writes, and lets go
	timed := make(chan time.Time, 1)
	go func() {
		now := c.Now()
		slow.Store(true) // the Now inside Time's first call, under the lock
		timed <- c.WallTime(now)
	}()
	<-inRead
	go func() {
		time.Sleep(50 * time.Millisecond)
		close(release)
	}()
	assert.NoError(t, c.Update(), "Update while another goroutine holds the lock")
	<-timed
}
