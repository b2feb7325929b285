package httplimit

import (
	"bytes"
	"encoding/json"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
)

// oracleInt is jsonInt by encoding/json: each level unmarshalled whole.
func oracleInt(data []byte, path []string) (int64, bool) {
	raw := json.RawMessage(data)
	for _, k := range path {
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return 0, false
		}
		v, ok := obj[k]
		if !ok {
			return 0, false
		}
		raw = v
	}
	return sluice.ParseCost(string(bytes.TrimSpace(raw)))
}

var jsonKeys = []string{"usage", "total_tokens", "max_tokens", "choices", "to\"tal", "é", "a\\b", "x"}

// jsonValue draws a JSON value of at most depth levels.
func jsonValue(t *rapid.T, depth int) any {
	kinds := 5
	if depth <= 0 {
		kinds = 3
	}
	switch rapid.IntRange(0, kinds-1).Draw(t, "kind") {
	case 0:
		return rapid.Int64().Draw(t, "int")
	case 1:
		return rapid.SampledFrom([]any{"s", "}", "{\"usage\":1}", "\\", 1.5, -3, true, nil}).Draw(t, "scalar")
	case 2:
		return rapid.StringN(0, 8, -1).Draw(t, "string")
	case 3:
		n := rapid.IntRange(0, 3).Draw(t, "len")
		a := make([]any, n)
		for i := range a {
			a[i] = jsonValue(t, depth-1)
		}
		return a
	}
	n := rapid.IntRange(0, 4).Draw(t, "members")
	m := map[string]any{}
	for range n {
		m[rapid.SampledFrom(jsonKeys).Draw(t, "key")] = jsonValue(t, depth-1)
	}
	return m
}

// TestJSONFieldAgreesWithEncodingJSON: on any JSON object, with any white
// space, the scan finds what encoding/json finds; on any bytes it ends
// without a panic.
func TestJSONFieldAgreesWithEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		doc := map[string]any{}
		for range rapid.IntRange(0, 4).Draw(t, "top") {
			doc[rapid.SampledFrom(jsonKeys).Draw(t, "key")] = jsonValue(t, 3)
		}
		data, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if rapid.Bool().Draw(t, "indent") {
			var b bytes.Buffer
			json.Indent(&b, data, " ", "\t")
			data = b.Bytes()
		}
		path := rapid.SliceOfN(rapid.SampledFrom(jsonKeys), 1, 3).Draw(t, "path")
		gn, gok := jsonInt(data, path)
		wn, wok := oracleInt(data, path)
		if gn != wn || gok != wok {
			t.Fatalf("jsonInt(%s, %q) = %d, %v; encoding/json finds %d, %v", data, path, gn, gok, wn, wok)
		}
		// Any cut of it, or any bytes, end without a panic.
		cut := rapid.IntRange(0, len(data)).Draw(t, "cut")
		jsonInt(data[:cut], path)
		jsonInt(rapid.SliceOfN(rapid.SampledFrom([]byte(`{}[]":,\ 1a`)), 0, 40).Draw(t, "junk"), path)
	})
}
