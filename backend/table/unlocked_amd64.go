//go:build !race

package table

const unlockedReads = true
