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
