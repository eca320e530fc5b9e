package schedclock

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestOwnCode: the package's counters, a Manual's and a Jiffies' Read
// and the default clock's reference are its own code, which never calls
// a writer method; another package's function is user code, whose
// writers name themselves (see lockAsWriter). Goroutine IDs tell two
// goroutines apart.
func TestOwnCode(t *testing.T) {
	j, err := newJiffies(100)
	assert.NoError(t, err)
	m, err := newManual(1e9, 64)
	assert.NoError(t, err)
	defer j.Stop()
	for name, f := range map[string]func() uint64{
		"Portable": Portable().Read, "Manual": m.Source().Read,
		"Jiffies": j.Source().Read, "Bubble": Bubble().Read, "nil": nil,
	} {
		assert.True(t, ownCode(f), name)
	}
	assert.True(t, ownCode(rawNow), "rawNow")
	// (A closure of this file is the package's own code: the external
	// tests' closures, TestAReadReenteringTheWriter's, are user code.)
	assert.False(t, ownCode(rand.Uint64), "a function of another package")
	assert.False(t, ownCode(time.Now().UnixNano), "a method value of another package")
	assert.NotZero(t, goroutineID())
	other := make(chan uint64)
	go func() { other <- goroutineID() }()
	assert.NotEqual(t, goroutineID(), <-other)
}
