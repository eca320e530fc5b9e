// Command servicenow is service timed with the package.
package main

import (
	"fmt"
	"net/http"
	"os"

	"github.com/schedclock/schedclock"
)

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		start := schedclock.Now()
		fmt.Fprintf(w, "hello %v\n", schedclock.Since(start))
	})
	if len(os.Args) > 1 {
		_ = http.ListenAndServe(os.Args[1], nil)
	}
}
