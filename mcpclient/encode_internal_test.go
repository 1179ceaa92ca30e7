package mcpclient

import (
	"encoding/json"
	"testing"
)

// TestTasksGetRequestIsWhatJSONWrites: the hand-written tasks/get body is byte for byte what
// json.Marshal writes, and a task id that needs escaping goes through json.Marshal.
func TestTasksGetRequestIsWhatJSONWrites(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"t_9f2c4e1a7b3d4c58a1e0", "a/b:c-d.e", `quote"d`, `back\slash`, "<script>", "ü", "tab\tid", ""} {
		got, err := encodeRequest("tg-7", "tasks/get", taskParams{TaskID: id})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(struct {
			JSONRPC string `json:"jsonrpc"`
			ID      string `json:"id"`
			Method  string `json:"method"`
			Params  any    `json:"params,omitempty"`
		}{"2.0", "tg-7", "tasks/get", taskParams{TaskID: id}})
		if string(got) != string(want) {
			t.Errorf("task id %q: wrote %s, json.Marshal writes %s", id, got, want)
		}
	}
}
