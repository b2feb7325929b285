module github.com/sluice-go/sluice

go 1.26

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
