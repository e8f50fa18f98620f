//go:build race

package generate

// raceDetector is set when the tests run under -race, which slows the
// model's loops tenfold: the statistical tests then take fewer samples.
const raceDetector = true
