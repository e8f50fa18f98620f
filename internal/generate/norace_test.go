//go:build !race

package generate

// raceDetector is set when the tests run under -race (see race_test.go).
const raceDetector = false
