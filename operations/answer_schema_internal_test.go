package operations

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/taskgate/taskgate/mcpclient"
)

func TestHostileRequestedSchemasAreRefusedOrBounded(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat(`}`, 5000)
	many := `{"type":"object","properties":{`
	for i := range 300 {
		if i > 0 {
			many += ","
		}
		many += fmt.Sprintf(`"f%03d":{"type":"string"}`, i)
	}
	many += `}}`
	manyChoices := make([]string, 1000)
	for i := range manyChoices {
		manyChoices[i] = fmt.Sprintf("c%d", i)
	}
	choicesDoc, _ := json.Marshal(map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "string", "enum": manyChoices}}})
	for name, c := range map[string]struct {
		doc     string
		refused bool
		check   func([]Field) string
	}{
		"deep":              {doc: `{"type":"object","properties":{"x":` + deep + `}}`, refused: true},
		"not an object":     {doc: `[1,2,3]`, refused: true},
		"type array":        {doc: `{"type":"array"}`, refused: true},
		"properties a list": {doc: `{"type":"object","properties":[1]}`, refused: true},
		"bad name":          {doc: `{"type":"object","properties":{"a\u0007b":{"type":"string"}}}`, refused: true},
		"many fields": {doc: many, check: func(f []Field) string {
			if len(f) != maxSchemaFields {
				return fmt.Sprintf("%d fields kept", len(f))
			}
			return ""
		}},
		"many choices": {doc: string(choicesDoc), check: func(f []Field) string {
			if len(f) != 1 || len(f[0].Choices) != maxChoices || !strings.Contains(f[0].Unchecked, "first 200") {
				return fmt.Sprintf("%+v", f)
			}
			return ""
		}},
		"wrong keyword types": {doc: `{"type":"object","required":"x","properties":{"x":{"type":"number","minimum":"low","maximum":[1],"default":"ten"},
			"y":{"type":"string","minLength":-1,"maxLength":2.5,"enum":"a","format":"phone"},"z":7,"w":{"type":["string","null"]}}}`,
			check: func(f []Field) string {
				if len(f) != 4 || f[1].Minimum != nil || f[1].Maximum != nil || f[1].Default != nil || !strings.Contains(f[1].Unchecked, "minimum is not a number") ||
					f[2].MinLength != nil || f[2].MaxLength != nil || len(f[2].Choices) != 0 || !strings.Contains(f[2].Unchecked, "format phone") ||
					!strings.Contains(f[3].Unchecked, "not an object") || !strings.Contains(f[0].Unchecked, "type is not a string") {
					return fmt.Sprintf("%+v", f)
				}
				return ""
			}},
	} {
		_, _, fields, err := parseRequestedSchema(json.RawMessage(c.doc))
		if c.refused != (err != nil) {
			t.Errorf("%s: err %v, refused %v", name, err, c.refused)
			continue
		}
		if c.check != nil {
			if p := c.check(fields); p != "" {
				t.Errorf("%s: %s", name, p)
			}
		}
	}
	if _, _, _, err := parseRequestedSchema(json.RawMessage(`{"type":"object","description":"` + strings.Repeat("x", MaxSchemaBytes) + `"}`)); err == nil {
		t.Error("a schema over the size bound was used")
	}
}

func TestSchemaWordsAreBoundedAndCleaned(t *testing.T) {
	doc := `{"type":"object","title":"` + strings.Repeat("é", 500) + `","description":"a\u202eb\u0000c","properties":{"x":{"type":"string","title":"T\u200bx"}}}`
	title, desc, fields, err := parseRequestedSchema(json.RawMessage(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(title) > maxTitle+len("…") || !strings.HasSuffix(title, "…") || desc != "abc" || fields[0].Title != "Tx" {
		t.Fatalf("title %q (%d bytes), description %q, field title %q", title, len(title), desc, fields[0].Title)
	}
}

func TestAnswerCheckFillsOnlyFittingDefaultsAndKeepsTheCallersMap(t *testing.T) {
	_, _, fields, err := parseRequestedSchema(json.RawMessage(`{"type":"object","properties":{
		"n":{"type":"integer","default":2.5},
		"s":{"type":"string","enum":["a","b"],"default":"c"},
		"m":{"type":"array","items":{"anyOf":[{"const":"x","title":"X"},{"const":"y","title":"Y"}]},"default":["y"]},
		"b":{"type":"boolean","default":false}},"required":["n"]}`))
	if err != nil {
		t.Fatal(err)
	}
	given := map[string]any{"n": float64(4)}
	out, err := checkAnswer(fields, mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: given})
	if err != nil {
		t.Fatal(err)
	}
	if len(given) != 1 {
		t.Fatalf("the caller's answer was changed: %v", given)
	}
	got, _ := json.Marshal(out)
	if string(got) != `{"b":false,"m":["y"],"n":4}` {
		t.Fatalf("sent %s: only defaults that fit their field are filled", got)
	}
	_, err = checkAnswer(fields, mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: map[string]any{}})
	var ae *AnswerError
	if !errors.As(err, &ae) || ae.Field != "n" || !strings.Contains(ae.Problem, "required") {
		t.Fatalf("an unfitting default satisfied a required field: %v", err)
	}
	if _, err := checkAnswer(fields, mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: map[string]any{"n": 1, "m": []any{"x", "x"}}}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("a repeated choice was taken: %v", err)
	}
	if out, err := checkAnswer(fields, mcpclient.InputResponse{Action: mcpclient.ActionDecline}); err != nil || out != nil {
		t.Fatalf("a decline is checked: %v %v", out, err)
	}
}

// Every primitive shape the 2025-11-25 elicitation schema allows is read with its choices and
// titles, and an answer is checked against each.
func TestEveryElicitationShapeIsRead(t *testing.T) {
	_, _, fields, err := parseRequestedSchema(json.RawMessage(`{"type":"object","properties":{
		"untitledSingle":{"type":"string","enum":["o1","o2"]},
		"titledSingle":{"type":"string","oneOf":[{"const":"v1","title":"First"},{"const":"v2","title":"Second"}]},
		"legacyEnum":{"type":"string","enum":["l1","l2"],"enumNames":["One","Two"]},
		"untitledMulti":{"type":"array","minItems":1,"maxItems":2,"items":{"type":"string","enum":["m1","m2","m3"]}},
		"titledMulti":{"type":"array","items":{"anyOf":[{"const":"t1","title":"T one"},{"const":"t2","title":"T two"}]}},
		"text":{"type":"string","format":"date-time","default":"2026-01-31T09:30:00Z"},
		"num":{"type":"number","minimum":-1.5},
		"flag":{"type":"boolean"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Field{}
	for _, f := range fields {
		if f.Unchecked != "" {
			t.Errorf("%s: %s", f.Name, f.Unchecked)
		}
		by[f.Name] = f
	}
	for name, want := range map[string]string{
		"untitledSingle": `[{"value":"o1"},{"value":"o2"}]`,
		"titledSingle":   `[{"value":"v1","title":"First"},{"value":"v2","title":"Second"}]`,
		"legacyEnum":     `[{"value":"l1","title":"One"},{"value":"l2","title":"Two"}]`,
		"untitledMulti":  `[{"value":"m1"},{"value":"m2"},{"value":"m3"}]`,
		"titledMulti":    `[{"value":"t1","title":"T one"},{"value":"t2","title":"T two"}]`,
	} {
		got, _ := json.Marshal(by[name].Choices)
		if string(got) != want {
			t.Errorf("%s choices %s, want %s", name, got, want)
		}
	}
	if !by["untitledMulti"].Multiple || !by["titledMulti"].Multiple || by["titledSingle"].Multiple || *by["untitledMulti"].MaxItems != 2 {
		t.Errorf("multi-selects: %+v %+v", by["untitledMulti"], by["titledMulti"])
	}
	accept := func(c map[string]any) error {
		_, err := checkAnswer(fields, mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: c})
		return err
	}
	if err := accept(map[string]any{"untitledSingle": "o2", "titledSingle": "v1", "legacyEnum": "l2", "untitledMulti": []any{"m1", "m3"},
		"titledMulti": []string{"t2"}, "num": -1.5, "flag": false}); err != nil {
		t.Fatalf("a fitting answer was refused: %v", err)
	}
	for field, c := range map[string]map[string]any{
		"titledSingle":  {"titledSingle": "First"}, // a title is not a value
		"legacyEnum":    {"legacyEnum": "One"},
		"untitledMulti": {"untitledMulti": []any{}},
		"titledMulti":   {"titledMulti": []any{"t3"}},
		"num":           {"num": -2},
		"text":          {"text": "tomorrow"},
	} {
		var ae *AnswerError
		if err := accept(c); !errors.As(err, &ae) || ae.Field != field {
			t.Errorf("%v: %v, want a refusal naming %s", c, err, field)
		}
	}
}
