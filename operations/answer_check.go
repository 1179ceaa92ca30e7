package operations

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/taskgate/taskgate/mcpclient"
)

// ErrInvalidAnswer: an accepted answer does not fit the schema the server asked for.
var ErrInvalidAnswer = errors.New("the answer does not fit the requested schema")

// AnswerError names the field of an answer that does not fit the requested schema.
type AnswerError struct {
	// Field is the property; Problem says what is wrong, in words.
	Field, Problem string
}

// Error implements error.
func (e *AnswerError) Error() string { return fmt.Sprintf("field %q: %s", e.Field, e.Problem) }

// Unwrap returns ErrInvalidAnswer.
func (e *AnswerError) Unwrap() error { return ErrInvalidAnswer }

// checkAnswer checks an accepted form answer against the fields the server asked for:
// every required field present, every present field of its requested type. It is checked
// before anything is sent, so a server never sees an answer it did not ask for.
func checkAnswer(fields []Field, resp mcpclient.InputResponse) error {
	if resp.Action != mcpclient.ActionAccept {
		return nil
	}
	for _, f := range fields {
		v, ok := resp.Content[f.Name]
		if !ok || v == nil {
			if f.Required {
				return &AnswerError{Field: f.Name, Problem: "required and missing"}
			}
			continue
		}
		if p := typeProblem(f.Type, v); p != "" {
			return &AnswerError{Field: f.Name, Problem: p}
		}
	}
	return nil
}

func typeProblem(typ string, v any) string {
	num, isNum := number(v)
	switch typ {
	case "string":
		if _, ok := v.(string); !ok {
			return "must be a string"
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return "must be true or false"
		}
	case "number":
		if !isNum {
			return "must be a number"
		}
	case "integer":
		if !isNum || num != math.Trunc(num) {
			return "must be a whole number"
		}
	}
	return ""
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}
