package web

import (
	"encoding/json"
	"strconv"

	"github.com/taskgate/taskgate/operations"
)

// formField is one field of a question's answer form, worked out from the requested schema:
// which control, its constraints as HTML attributes, and its choices. Nothing is chosen for
// the person unless the schema gives a default.
type formField struct {
	ID, Name    string
	Label       string // the schema's title, or the property name
	Key         string // the property name, shown beside a title
	Description string
	Required    bool
	Unchecked   string
	// Kind is bool, radio, select, checkbox or input.
	Kind string
	// InputType is the input's type for Kind input (text, email, url, date, number).
	InputType string
	// Value is the default filled into an input.
	Value   string
	Min     string
	Max     string
	Step    string
	MinLen  string
	MaxLen  string
	Hint    string
	Options []formOption
}

type formOption struct {
	Value, Label string
	Selected     bool
}

// radioLimit is the most choices shown as radio buttons; more are a drop-down.
const radioLimit = 4

func questionFields(opID, back string, q operations.PendingInput) []formField {
	out := make([]formField, 0, len(q.Fields))
	for _, f := range q.Fields {
		ff := formField{ID: "in-" + back + opID + "-" + f.Name, Name: "field." + f.Name, Label: f.Name, Description: f.Description,
			Required: f.Required, Unchecked: f.Unchecked, Kind: "input", InputType: "text"}
		if f.Title != "" {
			ff.Label, ff.Key = f.Title, f.Name
		}
		var def any
		if len(f.Default) > 0 {
			_ = json.Unmarshal(f.Default, &def)
		}
		defaults := map[string]bool{}
		switch d := def.(type) {
		case string:
			defaults[d] = true
		case []any:
			for _, v := range d {
				if s, ok := v.(string); ok {
					defaults[s] = true
				}
			}
		}
		switch {
		case f.Type == "boolean":
			ff.Kind = "bool"
			b, has := def.(bool)
			ff.Options = []formOption{{Value: "", Label: "choose…", Selected: !has}, {Value: "true", Label: "yes", Selected: has && b},
				{Value: "false", Label: "no", Selected: has && !b}}
		case len(f.Choices) > 0:
			ff.Kind = "select"
			if f.Multiple {
				ff.Kind = "checkbox"
			} else if len(f.Choices) <= radioLimit {
				ff.Kind = "radio"
			}
			for _, c := range f.Choices {
				label := c.Title
				if label == "" {
					label = c.Value
				}
				ff.Options = append(ff.Options, formOption{Value: c.Value, Label: label, Selected: defaults[c.Value]})
			}
			if ff.Kind == "checkbox" {
				ff.Hint = countHint(f.MinItems, f.MaxItems)
			}
		case f.Type == "number" || f.Type == "integer":
			ff.InputType, ff.Step = "number", "any"
			if f.Type == "integer" {
				ff.Step = "1"
			}
			if f.Minimum != nil {
				ff.Min = strconv.FormatFloat(*f.Minimum, 'f', -1, 64)
			}
			if f.Maximum != nil {
				ff.Max = strconv.FormatFloat(*f.Maximum, 'f', -1, 64)
			}
			if n, ok := def.(float64); ok {
				ff.Value = strconv.FormatFloat(n, 'f', -1, 64)
			}
		default:
			switch f.Format {
			case "email":
				ff.InputType = "email"
			case "uri":
				ff.InputType = "url"
			case "date":
				ff.InputType = "date"
			case "date-time":
				ff.Hint = "a date and time like 2026-01-31T09:30:00Z"
			}
			if f.MinLength != nil {
				ff.MinLen = strconv.Itoa(*f.MinLength)
			}
			if f.MaxLength != nil {
				ff.MaxLen = strconv.Itoa(*f.MaxLength)
			}
			if s, ok := def.(string); ok {
				ff.Value = s
			}
		}
		out = append(out, ff)
	}
	return out
}

func countHint(lo, hi *int) string {
	switch {
	case lo != nil && hi != nil:
		return "choose " + strconv.Itoa(*lo) + " to " + strconv.Itoa(*hi)
	case lo != nil:
		return "choose at least " + strconv.Itoa(*lo)
	case hi != nil:
		return "choose at most " + strconv.Itoa(*hi)
	}
	return ""
}

func anySelected(opts []formOption) bool {
	for _, o := range opts {
		if o.Selected {
			return true
		}
	}
	return false
}

// inputMessageMax is the longest question message shown: all that is kept.
const inputMessageMax = operations.MaxInputMessage
