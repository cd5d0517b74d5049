//go:build !race

package node_test

const raceDetector = false
