package config_test

import (
	"strings"
	"testing"

	"github.com/taskgate/taskgate/config"
)

const gateBase = `
owners: [{name: ops, contact: ops@example.com}]
servers:
  - {name: prod, url: "http://127.0.0.1:1/mcp"}
  - {name: staging, url: "http://127.0.0.1:2/mcp", gate_target: true}
workflows:
  - name: refund
    server: prod
    tool: work_required
    effect: effectful
    task_use: required
    fallback: {kind: reject}
    owners: [ops]
    gate:
      server: %s
      second_token: {env: GATE_SECOND}
      quick: {tool: work_optional, arguments: {duration_ms: 20}}
`

func TestGateTargetIsParsedAndItsServerChecked(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(strings.Replace(gateBase, "%s", "staging", 1)))
	if err != nil {
		t.Fatal(err)
	}
	wf, _ := c.Workflow("refund")
	s, _ := c.Server("staging")
	if wf.Gate == nil || wf.Gate.Server != "staging" || wf.Gate.Quick.Tool != "work_optional" || wf.Gate.SecondToken == nil || !s.GateTarget {
		t.Fatalf("gate %+v, staging %+v", wf.Gate, s)
	}
	if _, err := config.Parse([]byte(strings.Replace(gateBase, "%s", "nowhere", 1))); err == nil || !strings.Contains(err.Error(), "gate server") {
		t.Fatalf("an unknown gate server: %v", err)
	}
}
