module github.com/sluice-go/sluice/bench

go 1.26.0

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/sethvargo/go-limiter v0.7.1
	github.com/sluice-go/sluice v0.0.0
	golang.org/x/time v0.16.0
)

replace github.com/sluice-go/sluice => ../
