package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

// schemaQuestion is a requested schema with every rule the elicitation schema allows, words
// with markup in them, and defaults.
const schemaQuestion = `{"type": "object", "title": "Refund <b>details</b>", "description": "Check with the customer first",
 "properties": {
  "email":    {"type": "string", "format": "email", "title": "Customer email", "description": "Where the receipt goes"},
  "note":     {"type": "string", "minLength": 3, "maxLength": 10},
  "site":     {"type": "string", "format": "uri"},
  "day":      {"type": "string", "format": "date"},
  "at":       {"type": "string", "format": "date-time"},
  "reason":   {"type": "string", "enum": ["damaged", "late", "wrong", "duplicate", "other"]},
  "tier":     {"type": "string", "title": "Tier", "oneOf": [{"const": "gold", "title": "Gold <script>alert(1)</script>"}, {"const": "silver", "title": "Silver"}]},
  "tags":     {"type": "array", "maxItems": 2, "items": {"type": "string", "enum": ["vip", "repeat", "new"]}},
  "amount":   {"type": "number", "minimum": 1, "maximum": 100},
  "count":    {"type": "integer"},
  "notify":   {"type": "boolean", "default": true},
  "currency": {"type": "string", "enum": ["EUR", "USD"], "default": "EUR"},
  "priority": {"type": "integer", "default": 3}
 },
 "required": ["email", "amount", "count"]}`

func startSchemaQuestion(t *testing.T, b *opstest.Bundle, key string) (string, string, <-chan int) {
	t.Helper()
	args, _ := json.Marshal(map[string]any{"outcome": "input", "input_message": "Refund <i>A-1042</i>?", "input_schema": json.RawMessage(schemaQuestion)})
	id := b.Start(t, "refund", key, string(args)).Response.OperationID
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "pending input", func() bool {
		d := b.Detail(t, id)
		return d.Task.State == operations.StateInputRequired && len(d.Inputs) == 1
	})
	return id, b.Detail(t, id).Inputs[0].Key, passes
}

func TestAnswerAPIRefusesEachRuleAndSendsTheSchemaDefaults(t *testing.T) {
	t.Parallel()
	for _, era := range []string{"legacy", "extension"} {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			answerEveryRule(t, era)
		})
	}
}

func answerEveryRule(t *testing.T, era string) {
	e := newTestEnv(t)
	b := opstest.Setup(t, opstest.Options{Pool: e.pool, Era: era})
	e.srv.deps.Operations, e.srv.deps.Policy = b.Ops, b.Policy
	id, key, passes := startSchemaQuestion(t, b, "schema-1")
	self := "/api/v1/operations/" + id

	// The question keeps its words, its choices and a copy of the schema.
	res, body := e.apiDo(t, "acme-token", "GET", self, "", nil)
	var got struct {
		Inputs []operations.PendingInput `json:"inputs"`
	}
	if res.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil || len(got.Inputs) != 1 {
		t.Fatalf("detail: %d %.300s", res.StatusCode, body)
	}
	q := got.Inputs[0]
	byName := map[string]operations.Field{}
	for _, f := range q.Fields {
		byName[f.Name] = f
	}
	tier := byName["tier"]
	if q.Title != "Refund <b>details</b>" || q.Description != "Check with the customer first" || q.Message != "Refund <i>A-1042</i>?" ||
		len(q.Fields) != 13 || byName["email"].Title != "Customer email" || byName["email"].Description != "Where the receipt goes" ||
		len(tier.Choices) != 2 || tier.Choices[0] != (operations.Choice{Value: "gold", Title: "Gold <script>alert(1)</script>"}) ||
		!byName["tags"].Multiple || len(byName["tags"].Choices) != 3 || string(byName["currency"].Default) != `"EUR"` ||
		!strings.Contains(string(q.RequestedSchema), `"oneOf"`) {
		t.Fatalf("question as served: %+v", q)
	}

	ok := `"email": "a@example.com", "amount": 10, "count": 2`
	for _, c := range []struct{ content, field, rule string }{
		{`{"amount": 10, "count": 2}`, "email", "required"},
		{`{"email": "not an address", "amount": 10, "count": 2}`, "email", "format email"},
		{`{` + ok + `, "note": "ab"}`, "note", "minLength"},
		{`{` + ok + `, "note": "abcdefghijk"}`, "note", "maxLength"},
		{`{` + ok + `, "site": "no scheme"}`, "site", "format uri"},
		{`{` + ok + `, "day": "31/01/2026"}`, "day", "format date"},
		{`{` + ok + `, "at": "2026-01-31 09:30"}`, "at", "format date-time"},
		{`{` + ok + `, "reason": "bored"}`, "reason", "enum"},
		{`{` + ok + `, "tier": "bronze"}`, "tier", "enum"},
		{`{` + ok + `, "tags": ["vip", "gold"]}`, "tags", "items enum"},
		{`{` + ok + `, "tags": ["vip", "repeat", "new"]}`, "tags", "maxItems"},
		{`{` + ok + `, "tags": "vip"}`, "tags", "type array"},
		{`{"email": "a@example.com", "amount": 0.5, "count": 2}`, "amount", "minimum"},
		{`{"email": "a@example.com", "amount": 101, "count": 2}`, "amount", "maximum"},
		{`{"email": "a@example.com", "amount": "10", "count": 2}`, "amount", "type number"},
		{`{"email": "a@example.com", "amount": 10, "count": 2.5}`, "count", "type integer"},
		{`{` + ok + `, "notify": "yes"}`, "notify", "type boolean"},
		{`{` + ok + `, "extra": 1}`, "extra", "not asked for"},
	} {
		res, body := e.apiDo(t, "acme-token", "POST", self+"/input", `{"key": "`+key+`", "action": "accept", "content": `+c.content+`}`, nil)
		if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, `"invalid_answer"`) ||
			!strings.Contains(body, `\"`+c.field+`\"`) || !strings.Contains(body, c.rule) {
			t.Fatalf("answer %s: %d %s, want 422 naming %s and %s", c.content, res.StatusCode, body, c.field, c.rule)
		}
	}
	if d := b.Detail(t, id); d.Inputs[0].State != "open" {
		t.Fatalf("a refused answer closed the question: %s", d.Inputs[0].State)
	}

	// A fitting answer that omits the defaulted fields reaches the server with the defaults.
	res, body = e.apiDo(t, "acme-token", "POST", self+"/input", `{"key": "`+key+`", "action": "accept", "content": {`+ok+`, "tier": "silver", "tags": ["vip"], "day": "2026-01-31", "at": "2026-01-31T09:30:00Z", "site": "https://example.com/x"}}`, nil)
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("fitting answer: %d %s", res.StatusCode, body)
	}
	opstest.WaitFor(t, passes, 10*time.Second, "completed with its result", func() bool {
		d := b.Detail(t, id)
		return d.Task.State == operations.StateCompleted && d.Envelope != nil
	})
	d := b.Detail(t, id)
	if d.Envelope == nil {
		t.Fatal("no envelope")
	}
	// The receiver quotes the content it received; the answered values are redacted from what
	// is stored, so only the defaults the console filled (never typed by a person) show.
	for _, want := range []string{`"currency":"EUR"`, `"notify":true`, `"priority":3`} {
		if !strings.Contains(d.Envelope.Preview, want) {
			t.Fatalf("the server did not receive the default %s: %q", want, d.Envelope.Preview)
		}
	}
}

func TestQuestionFormShowsTheSchemaWordsAndChoicesEscaped(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	b := opstest.Setup(t, opstest.Options{Pool: e.pool, Era: "extension"})
	e.srv.deps.Operations, e.srv.deps.Policy = b.Ops, b.Policy
	id, key, passes := startSchemaQuestion(t, b, "schema-2")
	res, body := e.do(t, "operator", "GET", "/operations/"+id, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("page: %d", res.StatusCode)
	}
	for _, want := range []string{
		"Refund &lt;b&gt;details&lt;/b&gt;", "Check with the customer first", "Refund &lt;i&gt;A-1042&lt;/i&gt;?",
		"Customer email", "Where the receipt goes",
		`type="radio" name="field.tier" value="gold"`, "Gold &lt;script&gt;alert(1)&lt;/script&gt;",
		`type="checkbox" name="field.tags" value="vip"`, `<option value="damaged">`,
		`type="email"`, `type="date"`, `minlength="3"`, `maxlength="10"`, `min="1"`, `max="100"`,
	} {
		if !strings.Contains(body, want) {
			t.Fatalf("page lacks %s", want)
		}
	}
	if strings.Contains(body, "<script>alert(1)") || strings.Contains(body, "<b>details") {
		t.Fatal("the server's words are not escaped")
	}
	// Nothing is chosen for the person except where the schema gives a default.
	if strings.Contains(body, `value="gold" checked`) || strings.Contains(body, `value="damaged" selected`) ||
		!strings.Contains(body, `value="EUR" checked`) || !strings.Contains(body, `<option value="true" selected>`) {
		t.Fatal("the form pre-selects a choice the schema did not default, or misses a default")
	}
	if res, body := e.do(t, "operator", "GET", "/inbox", nil); res.StatusCode != http.StatusOK ||
		!strings.Contains(body, "Refund &lt;b&gt;details&lt;/b&gt;") || !strings.Contains(body, "Gold &lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Fatalf("inbox: %d, want the question's title and choices escaped", res.StatusCode)
	}
	// A form answer breaking a rule is refused naming the field and the rule, and nothing is sent.
	form := url.Values{"key": {key}, "action": {"accept"}, "field.email": {"a@example.com"}, "field.amount": {"500"}, "field.count": {"1"}}
	res, body = e.do(t, "operator", "POST", "/operations/"+id+"/input", form)
	if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "amount") || !strings.Contains(body, "at most 100") {
		t.Fatalf("form answer over the maximum: %d, want 422 naming amount and the maximum", res.StatusCode)
	}
	form.Set("field.amount", "50")
	form["field.tags"] = []string{"vip", "new"}
	form.Set("field.tier", "gold")
	if res, _ = e.do(t, "operator", "POST", "/operations/"+id+"/input", form); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("form answer: %d", res.StatusCode)
	}
	// The check boxes reach the server as a list, the radio choice as its value, and the
	// defaulted fields the form left empty as their defaults.
	opstest.WaitFor(t, passes, 10*time.Second, "completed with its result", func() bool {
		d := b.Detail(t, id)
		return d.Task.State == operations.StateCompleted && d.Envelope != nil
	})
	preview := b.Detail(t, id).Envelope.Preview
	for _, want := range []string{`"tags":[`, `"tier":`, `"currency":"EUR"`, `"notify":true`, `"priority":3`} {
		if !strings.Contains(preview, want) {
			t.Fatalf("the server did not receive %s: %q", want, preview)
		}
	}
}
