// Package examples holds the example policy file that the console's embedded default runs.
package examples

import _ "embed"

// Policy is examples/taskgate.yaml: the demo policy the console uses when no TASKGATE_CONFIG is set.
//
//go:embed taskgate.yaml
var Policy []byte
