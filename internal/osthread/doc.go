// Package osthread does to the calling OS thread what the cross-CPU
// check and the tests need: it lists the CPUs the thread may run on,
// pins the thread to one of them and gives it its mask back, says which
// CPU it runs on, yields that CPU, and arms a timer that sends the thread
// SIGPROF. The caller locks its goroutine to the thread first
// (runtime.LockOSThread); a thread whose mask could not be given back
// must exit with its goroutine, still locked, so that the runtime ends it
// rather than run other goroutines on one CPU.
//
// It is implemented on Linux; elsewhere every call says it cannot.
package osthread
