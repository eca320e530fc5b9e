package testenv

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// WithFiles runs f with each file named in files (an absolute path, a
// sysfs or procfs file as a rule) reading as the content given, in a
// private mount namespace: what the package under test reads of another
// machine's kernel (a current_clocksource that says kvm-clock on a TSC
// kernel) without changing this one's. f runs on a goroutine of its own,
// locked to a thread that alone has the namespace (Linux gives each
// thread its own), and must do its reading on that goroutine; it must
// not call t.FailNow (report with t.Errorf, or return what it saw). The
// thread ends with f. It needs root; t skips, saying so, otherwise.
func WithFiles(t testing.TB, files map[string]string, f func()) {
	t.Helper()
	RequireRoot(t)
	dir := t.TempDir()
	var setupErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Never unlocked: the thread, whose mount namespace is the
		// test's, ends with the goroutine instead of running others.
		runtime.LockOSThread()
		if setupErr = privateMounts(dir, files); setupErr != nil {
			return
		}
		f()
	}()
	<-done
	if setupErr != nil {
		t.Fatalf("private mount namespace: %v", setupErr)
	}
}

// privateMounts moves the calling thread into a mount namespace of its
// own, private from the machine's (no mount propagates either way), and
// bind-mounts a file of dir holding each content over its path.
func privateMounts(dir string, files map[string]string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	i := 0
	for path, content := range files {
		src := filepath.Join(dir, "file"+string(rune('a'+i)))
		i++
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			return err
		}
		if err := unix.Mount(src, path, "", unix.MS_BIND, ""); err != nil {
			return &os.PathError{Op: "bind mount over", Path: path, Err: err}
		}
	}
	return nil
}
