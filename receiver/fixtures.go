package receiver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
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

// elicitSummary describes an ElicitResult answer, bounded.
func elicitSummary(raw []byte) string {
	a := decodeAnswer(raw)
	b, _ := json.Marshal(a.Content)
	if len(b) > 300 {
		b = b[:300]
	}
	return fmt.Sprintf("action=%s, content=%s", a.Action, b)
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
		{name: "test_sampling", support: SupportForbidden, description: "Asks the client's model the prompt (sampling/createMessage).",
			schema: obj{"type": "object", "properties": obj{"prompt": obj{"type": "string"}}, "required": []string{"prompt"}},
			run: func(ctx context.Context, _ *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				ans, err := ask(ctx, []inputRequest{samplingFixture("sample", str2(c.args, "prompt", "Hello"), 100)}, "")
				if err != nil {
					return nil, askErr(ctx, err)
				}
				return textResult("LLM response: "+bound(samplingText(ans["sample"])), false), nil
			}},
		{name: "test_elicitation", support: SupportForbidden, description: "Asks the user for a username and email.",
			schema: obj{"type": "object", "properties": obj{"message": obj{"type": "string"}}, "required": []string{"message"}},
			run: func(ctx context.Context, _ *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				q := inputRequest{Key: "user", Method: "elicitation/create", Params: obj{
					"message": str2(c.args, "message", "Please provide your information"),
					"requestedSchema": obj{"type": "object", "properties": obj{
						"username": obj{"type": "string", "description": "User's response"},
						"email":    obj{"type": "string", "description": "User's email address"},
					}, "required": []string{"username", "email"}},
				}}
				ans, err := ask(ctx, []inputRequest{q}, "")
				if err != nil {
					return nil, askErr(ctx, err)
				}
				return textResult("User response: "+elicitSummary(ans["user"]), false), nil
			}},
		{name: "test_elicitation_sep1034_defaults", support: SupportForbidden, description: "Elicits with a default for every primitive type.", schema: none,
			run: func(ctx context.Context, _ *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				q := inputRequest{Key: "defaults", Method: "elicitation/create", Params: obj{
					"message": "Please review and update the form fields with defaults",
					"requestedSchema": obj{"type": "object", "properties": obj{
						"name":     obj{"type": "string", "description": "User name", "default": "John Doe"},
						"age":      obj{"type": "integer", "description": "User age", "default": 30},
						"score":    obj{"type": "number", "description": "User score", "default": 95.5},
						"status":   obj{"type": "string", "description": "User status", "enum": []string{"active", "inactive", "pending"}, "default": "active"},
						"verified": obj{"type": "boolean", "description": "Verification status", "default": true},
					}},
				}}
				ans, err := ask(ctx, []inputRequest{q}, "")
				if err != nil {
					return nil, askErr(ctx, err)
				}
				return textResult("Elicitation completed: "+elicitSummary(ans["defaults"]), false), nil
			}},
		{name: "test_elicitation_sep1330_enums", support: SupportForbidden, description: "Elicits with every enum schema variant.", schema: none,
			run: func(ctx context.Context, _ *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				titled := func(prefix, word string) []any {
					var out []any
					for i, t := range []string{"First", "Second", "Third"} {
						out = append(out, obj{"const": fmt.Sprintf("%s%d", prefix, i+1), "title": t + " " + word})
					}
					return out
				}
				q := inputRequest{Key: "enums", Method: "elicitation/create", Params: obj{
					"message": "Please select options from the enum fields",
					"requestedSchema": obj{"type": "object", "properties": obj{
						"untitledSingle": obj{"type": "string", "description": "Select one option", "enum": []string{"option1", "option2", "option3"}},
						"titledSingle":   obj{"type": "string", "description": "Select one option with titles", "oneOf": titled("value", "Option")},
						"legacyEnum":     obj{"type": "string", "description": "Select one option (legacy)", "enum": []string{"opt1", "opt2", "opt3"}, "enumNames": []string{"Option One", "Option Two", "Option Three"}},
						"untitledMulti":  obj{"type": "array", "description": "Select multiple options", "minItems": 1, "maxItems": 3, "items": obj{"type": "string", "enum": []string{"option1", "option2", "option3"}}},
						"titledMulti":    obj{"type": "array", "description": "Select multiple options with titles", "minItems": 1, "maxItems": 3, "items": obj{"anyOf": titled("value", "Choice")}},
					}},
				}}
				ans, err := ask(ctx, []inputRequest{q}, "")
				if err != nil {
					return nil, askErr(ctx, err)
				}
				return textResult("Elicitation completed: "+elicitSummary(ans["enums"]), false), nil
			}},
		{name: "test_tool_with_progress", support: SupportForbidden, description: "Reports progress 0, 50 and 100 of 100 when given a progressToken.", schema: none,
			run: func(ctx context.Context, _ *Receiver, c *toolCall, _ asker) (obj, *rpcError) {
				token, hasToken := c.meta["progressToken"]
				for i, p := range []int{0, 50, 100} {
					if i > 0 {
						if err := sleep(ctx, 50*time.Millisecond); err != nil {
							return nil, cancelledErr(ctx)
						}
					}
					if hasToken && c.notify != nil {
						c.notify("notifications/progress", obj{"progressToken": token, "progress": p, "total": 100})
					}
				}
				return textResult("Progress reported: 0, 50, 100 of 100", false), nil
			}},
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
