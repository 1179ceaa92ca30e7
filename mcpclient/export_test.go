package mcpclient

import "encoding/json"

// Decoders exported for the fuzz and unit tests of package mcpclient_test.

// DecodeMessageForTest decodes one JSON-RPC message.
func DecodeMessageForTest(data []byte, lim Limits) error {
	_, err := decodeMessage(data, lim)
	return err
}

// DecodeLegacyCreateForTest decodes a 2025-11-25 CreateTaskResult.
func DecodeLegacyCreateForTest(raw json.RawMessage, lim Limits) (Task, error) {
	return decodeLegacyCreate(raw, lim)
}

// DecodeTaskForTest decodes a flat task of era.
func DecodeTaskForTest(raw json.RawMessage, era Era, lim Limits) (Task, error) {
	return decodeTask(raw, era, lim)
}

// DecodeExtSnapshotForTest decodes an extension tasks/get result.
func DecodeExtSnapshotForTest(raw json.RawMessage, lim Limits) (Snapshot, error) {
	return decodeExtSnapshot(raw, lim)
}

// DecodeExtCallForTest decodes an extension tools/call result and returns its kind.
func DecodeExtCallForTest(raw json.RawMessage, lim Limits) (string, error) {
	r, err := decodeExtCall(raw, lim)
	if err != nil {
		return "", err
	}
	return string(r.Kind), nil
}

// DecodeToolResultForTest decodes a CallToolResult.
func DecodeToolResultForTest(raw json.RawMessage, lim Limits) (*ToolResult, error) {
	return decodeToolResult(raw, lim)
}
