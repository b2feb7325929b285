// Package fuzz holds the fuzz targets that cross package lines: a gateway
// configuration compiled and put in front of a handler, requests of any
// shape sent through it; and records of any bytes read by the engine from a
// real store. It has no code of its own: the targets are in its tests, and
// their seed corpora under testdata/fuzz, so that a plain go test ./fuzz
// runs every seed.
package fuzz
