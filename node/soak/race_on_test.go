//go:build race

package soak_test

// raceDetector says the tests run under the race detector, which makes
// the nodes several times slower: load tests scale their rates down.
const raceDetector = true
