//go:build !race

package soak_test

const raceDetector = false
