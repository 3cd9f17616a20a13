package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStressLeavesNothing(t *testing.T) {
	var out, errb bytes.Buffer
	require.NoError(t, run([]string{"stress", "--seconds", "0.3", "--goroutines", "8"}, &out, &errb), errb.String())
	var res stressResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	assert.Positive(t, res.Scopes)
	assert.Positive(t, res.Allocations)
	assert.Zero(t, res.AllocatedAfter)
	assert.Zero(t, res.OpenScopes)
	assert.Error(t, run([]string{"stress", "--driver", "tpu"}, &out, &errb))
}
