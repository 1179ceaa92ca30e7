package receiver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// ProfileConformance adds the fixture tools the MCP conformance suites call.
const ProfileConformance = "conformance"

// Tiny valid media for the content fixtures: a 1×1 PNG and a 44-byte WAV
// header with no samples.
const (
	fixturePNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
	fixtureWAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA="
)

func elicitFixture(key, message, prop, typ string) inputRequest {
	return inputRequest{Key: key, Method: "elicitation/create", Params: obj{
		"message":         message,
		"requestedSchema": obj{"type": "object", "properties": obj{prop: obj{"type": typ}}, "required": []string{prop}},
	}}
}

func samplingFixture(key, text string, maxTokens int) inputRequest {
	return inputRequest{Key: key, Method: "sampling/createMessage", Params: obj{
		"messages":  []any{obj{"role": "user", "content": obj{"type": "text", "text": text}}},
		"maxTokens": maxTokens,
	}}
}

func rootsFixture(key string) inputRequest {
	return inputRequest{Key: key, Method: "roots/list", Params: obj{}}
}

// samplingText is the text of a CreateMessageResult answer.
func samplingText(raw []byte) string {
	var a struct {
		Content struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	_ = json.Unmarshal(raw, &a)
	return a.Content.Text
}

// rootURIs lists the uris of a ListRootsResult answer.
func rootURIs(raw []byte) []string {
	var a struct {
		Roots []struct {
			URI string `json:"uri"`
		} `json:"roots"`
	}
	_ = json.Unmarshal(raw, &a)
	var out []string
	for _, r := range a.Roots {
		out = append(out, r.URI)
	}
	return out
}

func fixedResult(content ...any) func(context.Context, *Receiver, *toolCall, asker) (obj, *rpcError) {
	return func(context.Context, *Receiver, *toolCall, asker) (obj, *rpcError) {
		return obj{"content": content}, nil
	}
}

// conformanceTools are the fixtures named by the suites' tools-*, json-schema,
// input-required-result-* and server-stateless scenarios. They are plain
// tools (no task support) and bounded: answers are echoed truncated.
func conformanceTools() []*toolDef {
	none := obj{"type": "object", "properties": obj{}}
	text := func(s string) obj { return obj{"type": "text", "text": s} }
	bound := func(s string) string {
		if len(s) > 200 {
			s = s[:200]
		}
		return s
	}
	return []*toolDef{
		{name: "test_simple_text", support: SupportForbidden, description: "Returns one text block.", schema: none,
			run: fixedResult(text("This is a simple text response for testing."))},
		{name: "test_image_content", support: SupportForbidden, description: "Returns a 1x1 PNG image.", schema: none,
			run: fixedResult(obj{"type": "image", "data": fixturePNG, "mimeType": "image/png"})},
		{name: "test_audio_content", support: SupportForbidden, description: "Returns a tiny WAV clip.", schema: none,
			run: fixedResult(obj{"type": "audio", "data": fixtureWAV, "mimeType": "audio/wav"})},
		{name: "test_embedded_resource", support: SupportForbidden, description: "Returns an embedded text resource.", schema: none,
			run: fixedResult(obj{"type": "resource", "resource": obj{"uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}})},
		{name: "test_multiple_content_types", support: SupportForbidden, description: "Returns text, an image and a resource.", schema: none,
			run: fixedResult(text("Multiple content types test:"),
				obj{"type": "image", "data": fixturePNG, "mimeType": "image/png"},
				obj{"type": "resource", "resource": obj{"uri": "test://mixed-content-resource", "mimeType": "application/json", "text": `{"test":"data","value":123}`}})},
		{name: "test_error_handling", support: SupportForbidden, description: "Always returns a tool error.", schema: none,
			run: func(context.Context, *Receiver, *toolCall, asker) (obj, *rpcError) {
				return textResult("This tool intentionally returns an error for testing", true), nil
			}},
		{name: "json_schema_2020_12_tool", support: SupportForbidden, description: "Tool with JSON Schema 2020-12 features", schema: obj{
			"$schema": "https://json-schema.org/draft/2020-12/schema",
			"type":    "object",
			"$defs": obj{"address": obj{"$anchor": "addressDef", "type": "object",
				"properties": obj{"street": obj{"type": "string"}, "city": obj{"type": "string"}}}},
			"properties": obj{
				"name":          obj{"type": "string"},
				"address":       obj{"$ref": "#/$defs/address"},
				"contactMethod": obj{"type": "string", "enum": []string{"phone", "email"}},
				"phone":         obj{"type": "string"},
				"email":         obj{"type": "string"},
			},
			"allOf":                []any{obj{"anyOf": []any{obj{"required": []string{"phone"}}, obj{"required": []string{"email"}}}}},
			"if":                   obj{"properties": obj{"contactMethod": obj{"const": "phone"}}, "required": []string{"contactMethod"}},
			"then":                 obj{"required": []string{"phone"}},
			"else":                 obj{"required": []string{"email"}},
			"additionalProperties": false,
		}, run: fixedResult(text("Schema accepted"))},
		{name: "test_missing_capability", support: SupportForbidden, description: "Needs the client's sampling capability; -32021 without it.", schema: none,
			run: func(_ context.Context, _ *Receiver, c *toolCall, _ asker) (obj, *rpcError) {
				if _, has := c.clientCaps["sampling"]; !has {
					return nil, missingCapabilityError([]string{"sampling"})
				}
				return textResult("The client declared sampling.", false), nil
			}},
		{name: "test_input_required_result_elicitation", support: SupportForbidden, description: "Asks for user_name, then greets.", schema: none,
			run: func(ctx context.Context, _ *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				ans, err := ask(ctx, []inputRequest{elicitFixture("user_name", "What is your name?", "name", "string")}, "")
				if err != nil {
					return nil, askErr(ctx, err)
				}
				name, _ := decodeAnswer(ans["user_name"]).Content["name"].(string)
				return textResult("Hello, "+bound(name)+"!", false), nil
			}},
		{name: "test_input_required_result_sampling", support: SupportForbidden, description: "Asks the client's model a question.", schema: none,
			run: func(ctx context.Context, _ *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				ans, err := ask(ctx, []inputRequest{samplingFixture("capital_question", "What is the capital of France?", 100)}, "")
				if err != nil {
					return nil, askErr(ctx, err)
				}
				return textResult("The model answered: "+bound(samplingText(ans["capital_question"])), false), nil
			}},
		{name: "test_input_required_result_list_roots", support: SupportForbidden, description: "Asks for the client's roots.", schema: none,
			run: func(ctx context.Context, _ *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				ans, err := ask(ctx, []inputRequest{rootsFixture("client_roots")}, "")
				if err != nil {
					return nil, askErr(ctx, err)
				}
				roots := rootURIs(ans["client_roots"])
				if len(roots) > 10 {
					roots = roots[:10]
				}
				return textResult(fmt.Sprintf("Client roots (%d): %s", len(roots), bound(strings.Join(roots, ", "))), false), nil
			}},
		{name: "test_input_required_result_request_state", support: SupportForbidden, description: "Asks for confirmation and checks the echoed requestState.", schema: none,
			run: func(ctx context.Context, _ *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				if _, err := ask(ctx, []inputRequest{elicitFixture("confirm", "Please confirm", "ok", "boolean")}, ""); err != nil {
					return nil, askErr(ctx, err)
				}
				if !c.stateOK {
					return nil, errf(CodeInvalidParams, "Invalid params: requestState is required with inputResponses")
				}
				return textResult("Confirmed: state-ok", false), nil
			}},
		{name: "test_input_required_result_multiple_inputs", support: SupportForbidden, description: "Asks for a name, a sampled greeting and the roots at once.", schema: none,
			run: func(ctx context.Context, _ *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				ans, err := ask(ctx, []inputRequest{
					elicitFixture("user_name", "What is your name?", "name", "string"),
					samplingFixture("greeting", "Generate a greeting", 50),
					rootsFixture("client_roots"),
				}, "")
				if err != nil {
					return nil, askErr(ctx, err)
				}
				name, _ := decodeAnswer(ans["user_name"]).Content["name"].(string)
				return textResult(fmt.Sprintf("%s, %s (%d roots)", bound(samplingText(ans["greeting"])), bound(name), len(rootURIs(ans["client_roots"]))), false), nil
			}},
		{name: "test_input_required_result_multi_round", support: SupportForbidden, description: "Asks two questions in two rounds.", schema: none,
			run: func(ctx context.Context, _ *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				a1, err := ask(ctx, []inputRequest{elicitFixture("step1", "Step 1: What is your name?", "name", "string")}, "")
				if err != nil {
					return nil, askErr(ctx, err)
				}
				a2, err := ask(ctx, []inputRequest{elicitFixture("step2", "Step 2: What is your favorite color?", "color", "string")}, "")
				if err != nil {
					return nil, askErr(ctx, err)
				}
				name, _ := decodeAnswer(a1["step1"]).Content["name"].(string)
				color, _ := decodeAnswer(a2["step2"]).Content["color"].(string)
				return textResult(fmt.Sprintf("%s likes %s", bound(name), bound(color)), false), nil
			}},
		{name: "test_input_required_result_tampered_state", support: SupportForbidden, description: "Issues an HMAC-protected requestState.", schema: none,
			run: func(ctx context.Context, _ *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				if _, err := ask(ctx, []inputRequest{elicitFixture("confirm", "Please confirm", "ok", "boolean")}, ""); err != nil {
					return nil, askErr(ctx, err)
				}
				return textResult("State verified", false), nil
			}},
		{name: "test_input_required_result_capabilities", support: SupportForbidden, description: "Asks only for input the client declared it can give.", schema: none,
			run: func(ctx context.Context, _ *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				var reqs []inputRequest
				for _, q := range []inputRequest{
					elicitFixture("user_name", "What is your name?", "name", "string"),
					samplingFixture("greeting", "Generate a greeting", 50),
					rootsFixture("client_roots"),
				} {
					if len(missingCapabilities(c.clientCaps, []inputRequest{q})) == 0 {
						reqs = append(reqs, q)
					}
				}
				if len(reqs) == 0 {
					return textResult("The client declared no input capability; nothing asked.", false), nil
				}
				ans, err := ask(ctx, reqs, "")
				if err != nil {
					return nil, askErr(ctx, err)
				}
				return textResult(fmt.Sprintf("Received %d answers", len(ans)), false), nil
			}},
	}
}
