package testenv

import (
	"os"
	"slices"
	"testing"
)

func TestClocksourceListsTheCurrentOne(t *testing.T) {
	cur, avail, ok := Clocksource()
	if !ok {
		if _, err := os.Stat(clocksourceDir + "current_clocksource"); err == nil {
			t.Fatal("sysfs names a clocksource, Clocksource says it does not")
		}
		t.Skip("this system does not say which clocksource it runs on")
	}
	if cur == "" {
		t.Fatal("current clocksource is empty")
	}
	if len(avail) > 0 && !slices.Contains(avail, cur) {
		t.Fatalf("current clocksource %q not among the available %q", cur, avail)
	}
}

func TestQualifyingFollowsTheEnvironment(t *testing.T) {
	t.Setenv(QualifyEnv, "1")
	if !Qualifying() {
		t.Fatalf("%s=1 but not qualifying", QualifyEnv)
	}
	t.Setenv(QualifyEnv, "")
	if Qualifying() {
		t.Fatalf("%s empty but qualifying", QualifyEnv)
	}
}

// TestWithFilesShowsTheThreadAnotherKernel: inside WithFiles the
// clocksource files read as given, and outside (the machine, the other
// threads) as they were.
func TestWithFilesShowsTheThreadAnotherKernel(t *testing.T) {
	cur, _, ok := Clocksource()
	if !ok {
		t.Skip("this system does not say which clocksource it runs on")
	}
	other := "kvm-clock"
	if cur == other {
		other = "tsc"
	}
	var inside string
	var insideAvail []string
	WithFiles(t, map[string]string{
		clocksourceDir + "current_clocksource":   other + "\n",
		clocksourceDir + "available_clocksource": "hpet " + other + " \n",
	}, func() {
		inside, insideAvail, _ = Clocksource()
	})
	if inside != other || !slices.Equal(insideAvail, []string{"hpet", other}) {
		t.Errorf("inside: %q %q, want %q [hpet %s]", inside, insideAvail, other, other)
	}
	if now, _, _ := Clocksource(); now != cur {
		t.Errorf("outside: %q, want %q (the machine's)", now, cur)
	}
}

// TestSwitchClocksourceRestores: inside a subtest that switched it the
// kernel runs on the other clocksource, and after it on the one before.
func TestSwitchClocksourceRestores(t *testing.T) {
	Qualify(t)
	cur, avail, ok := Clocksource()
	if !ok {
		t.Skip("this system does not say which clocksource it runs on")
	}
	i := slices.IndexFunc(avail, func(s string) bool { return s != cur })
	if i < 0 {
		t.Skipf("the kernel offers no clocksource but %s", cur)
	}
	other := avail[i]
	t.Run("switched", func(t *testing.T) {
		SwitchClocksource(t, other)
		if now, _, _ := Clocksource(); now != other {
			t.Fatalf("the kernel runs on %q, want %q", now, other)
		}
	})
	if now, _, _ := Clocksource(); now != cur {
		t.Fatalf("after the subtest the kernel runs on %q, want %q back", now, cur)
	}
}
