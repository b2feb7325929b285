//go:build !amd64 || race

package table

const unlockedReads = false
