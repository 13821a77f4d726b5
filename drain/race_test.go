//go:build race

package drain_test

// raceDetector: the tests run under the race detector, which makes every
// goroutine several times slower.
const raceDetector = true
