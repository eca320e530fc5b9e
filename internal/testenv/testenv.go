// Package testenv says what a test depends on and whether it runs here:
// the qualification layer (tests that need real hardware, load or long
// time) and the machine's facts (the kernel's clocksource, root, CPUs).
//
// A plain go test runs the fast layer alone, on any machine. A
// qualification test calls Qualify first; make qualify (and make
// test-full, and CI) sets SCHEDCLOCK_QUALIFY=1 to run them. A test that
// needs something of the machine checks it with the functions here and
// skips with the reason when it is absent, never assuming the
// development machine.
package testenv

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/schedclock/schedclock/internal/cpu"
)

// QualifyEnv is the environment variable that turns the qualification
// layer on.
const QualifyEnv = "SCHEDCLOCK_QUALIFY"

// Qualifying reports whether the qualification layer runs.
func Qualifying() bool { return os.Getenv(QualifyEnv) == "1" }

// Qualify skips t unless the qualification layer runs: t needs real
// hardware, load or long time, which a plain go test does not give it.
func Qualify(t testing.TB) {
	t.Helper()
	if !Qualifying() {
		t.Skipf("qualification layer: runs with %s=1 (make qualify)", QualifyEnv)
	}
}

// clocksourceDir is where Linux says which clocksource its timekeeping
// runs on.
const clocksourceDir = "/sys/devices/system/clocksource/clocksource0/"

// Clocksource returns the kernel's current clocksource ("tsc",
// "kvm-clock", "arch_sys_counter", ...) and the ones it could switch to,
// or ok false where sysfs does not say (not Linux, no sysfs).
func Clocksource() (current string, available []string, ok bool) {
	if runtime.GOOS != "linux" {
		return "", nil, false
	}
	cur, err := os.ReadFile(clocksourceDir + "current_clocksource")
	if err != nil {
		return "", nil, false
	}
	avail, _ := os.ReadFile(clocksourceDir + "available_clocksource")
	return strings.TrimSpace(string(cur)), strings.Fields(string(avail)), true
}

// RequireClocksource skips t unless the kernel runs on the clocksource
// named want.
func RequireClocksource(t testing.TB, want string) {
	t.Helper()
	cur, _, ok := Clocksource()
	switch {
	case !ok:
		t.Skipf("needs a kernel on the %s clocksource: this system does not say which it runs on", want)
	case cur != want:
		t.Skipf("needs a kernel on the %s clocksource: this one runs on %s", want, cur)
	}
}

// RequireRoot skips t unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// Emulated reports whether the test binary runs under a user-mode
// emulator (qemu-user), where the counters and the scheduler are the
// emulator's: what a test measures of time there is not the machine's.
// (qemu-user shows the guest binary as /proc/self/exe, so it is told by
// the host's /proc/cpuinfo it passes through: see cpu.Emulated.)
func Emulated() bool { return cpu.Emulated() }

// RequireCPUs skips t unless n CPUs can run its goroutines at once.
func RequireCPUs(t testing.TB, n int) {
	t.Helper()
	if runtime.GOMAXPROCS(0) < n || runtime.NumCPU() < n {
		t.Skipf("needs %d CPUs: GOMAXPROCS %d, %d CPUs", n, runtime.GOMAXPROCS(0), runtime.NumCPU())
	}
}

// RequireClocksourceAvailable skips t unless the kernel could run on the
// clocksource named want (available_clocksource lists it, or it is the
// current one).
func RequireClocksourceAvailable(t testing.TB, want string) {
	t.Helper()
	cur, avail, ok := Clocksource()
	switch {
	case !ok:
		t.Skipf("needs a kernel that can run on the %s clocksource: this system does not say which it runs on", want)
	case cur != want && !slices.Contains(avail, want):
		t.Skipf("needs a kernel that can run on the %s clocksource: this one runs on %s and offers %q", want, cur, avail)
	}
}

// SwitchClocksource switches the kernel's clocksource to want for the
// rest of t and back to the one it ran on when t ends (t.Cleanup). It
// changes the whole machine's timekeeping, so only a qualification test
// calls it; it needs root and a kernel that lists want among its
// available clocksources, and skips t, saying which is missing,
// otherwise. A kernel already on want is left as it is.
func SwitchClocksource(t testing.TB, want string) {
	t.Helper()
	RequireClocksourceAvailable(t, want)
	cur, _, _ := Clocksource()
	if cur == want {
		return
	}
	RequireRoot(t)
	if err := writeClocksource(want); err != nil {
		t.Fatalf("switching the kernel's clocksource from %s to %s: %v", cur, want, err)
	}
	t.Cleanup(func() {
		if err := writeClocksource(cur); err != nil {
			t.Errorf("restoring the kernel's clocksource %s (it runs on %s): %v", cur, want, err)
		}
	})
}

// writeClocksource makes the kernel run on name and checks that it does.
func writeClocksource(name string) error {
	if err := os.WriteFile(clocksourceDir+"current_clocksource", []byte(name), 0); err != nil {
		return err
	}
	if cur, _, _ := Clocksource(); cur != name {
		return fmt.Errorf("the kernel runs on %q after the write", cur)
	}
	return nil
}
