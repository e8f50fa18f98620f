// Package testwatch turns a test package that hangs into a failure that
// says where it hangs. Main runs a package's tests under a limit shorter
// than go test's own -timeout; past it, it prints every goroutine's stack
// and then, last, a few lines naming the tests still running and where
// pipeshard's own goroutines wait, because CI logs are often read from
// their tail.
package testwatch
