//go:build race

package engine_test

const raceOn13 = true
