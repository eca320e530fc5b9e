package schedclock

import "sync"

// lazy is sync.OnceValue as a value rather than a closure: a
// package-level lazy is static data, where sync.OnceValue allocates
// its state at package initialisation.
type lazy[T any] struct {
	once  sync.Once
	make  func() T
	value T
}

// get returns make's value, calling it the first time.
func (l *lazy[T]) get() T {
	l.once.Do(func() { l.value = l.make() })
	return l.value
}
