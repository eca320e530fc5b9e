module github.com/schedclock/schedclock/internal/peers

go 1.26.0

require (
	github.com/aristanetworks/goarista v0.0.0-20190712234253-ed1100a1c015
	github.com/loov/hrtime v1.0.3
	github.com/schedclock/schedclock v0.0.0
	github.com/templexxx/tsc v0.0.3
	golang.org/x/sys v0.50.0
)

require github.com/templexxx/cpu v0.0.8-0.20200904080713-862a179c181c // indirect

replace github.com/schedclock/schedclock => ../..
