package killswitch

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The evaluator cases of the flagd test bed (testdata/flagd-testbed, from the open-feature
// flagd-testbed repository's evaluator directory) run against this package's evaluation. Only
// the high-precision fractional cases (@fractional-v2, what flagd does now) apply; the legacy
// float bucketing (@fractional-v1) is skipped, as are the metadata-only scenarios.

type scenario struct {
	name  string
	tags  []string
	steps []string
}

// parseFeature expands a feature file's scenarios and outlines into concrete scenarios.
func parseFeature(t *testing.T, path string) []scenario {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []scenario
	var background, steps []string
	var name string
	var tags, pending, exTags []string
	var header []string
	inBackground, outline := false, false
	var featureTags []string
	flush := func() {
		if name != "" && !outline {
			out = append(out, scenario{name: name, tags: tags, steps: append(append([]string{}, background...), steps...)})
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "@"):
			pending = append(pending, strings.Fields(line)...)
		case strings.HasPrefix(line, "Feature:"):
			featureTags, pending = pending, nil
		case strings.HasPrefix(line, "Background:"):
			inBackground = true
		case strings.HasPrefix(line, "Scenario Outline:"), strings.HasPrefix(line, "Scenario:"):
			flush()
			inBackground = false
			outline = strings.HasPrefix(line, "Scenario Outline:")
			name = strings.TrimSpace(line[strings.Index(line, ":")+1:])
			tags, pending, steps, header = append(append([]string{}, featureTags...), pending...), nil, nil, nil
		case strings.HasPrefix(line, "Examples"):
			exTags, pending, header = pending, nil, nil
		case strings.HasPrefix(line, "|"):
			cells := splitRow(line)
			if !outline {
				steps = append(steps, "TABLE "+strings.Join(cells, "|"))
				continue
			}
			if header == nil {
				header = cells
				continue
			}
			var concrete []string
			for _, s := range append(append([]string{}, background...), steps...) {
				for i, h := range header {
					s = strings.ReplaceAll(s, "<"+h+">", cells[i])
				}
				concrete = append(concrete, s)
			}
			out = append(out, scenario{name: name + " " + strings.Join(cells, ","), tags: append(append([]string{}, tags...), exTags...), steps: concrete})
		default:
			for _, kw := range []string{"Given ", "When ", "Then ", "And ", "But "} {
				if strings.HasPrefix(line, kw) {
					line = strings.TrimPrefix(line, kw)
					if inBackground {
						background = append(background, line)
					} else {
						steps = append(steps, line)
					}
				}
			}
		}
	}
	flush()
	return out
}

func splitRow(line string) []string {
	line = strings.Trim(line, "|")
	var cells []string
	for _, c := range strings.Split(line, "|") {
		cells = append(cells, strings.TrimSpace(c))
	}
	return cells
}

var (
	reFlag     = regexp.MustCompile(`^a (\w+)-flag with key "([^"]*)" and a fallback value "(.*)"$`)
	reCtxKey   = regexp.MustCompile(`^a context containing a key "([^"]*)", with type "(\w+)" and with value "(.*)"$`)
	reCtxTK    = regexp.MustCompile(`^a context containing a targeting key with value "(.*)"$`)
	reCtxNest  = regexp.MustCompile(`^a context containing a nested property with outer key "([^"]*)" and inner key "([^"]*)", with value "(.*)"$`)
	reValue    = regexp.MustCompile(`^the resolved details value should be "(.*)"$`)
	reReason   = regexp.MustCompile(`^the reason should be "(.*)"$`)
	reErrCode  = regexp.MustCompile(`^the error-code should be "(.*)"$`)
	kindByName = map[string]Kind{"Boolean": KindBool, "String": KindString, "Integer": KindInt, "Float": KindFloat, "Object": KindObject}
)

func typedValue(t *testing.T, kind string, s string) any {
	t.Helper()
	s = strings.ReplaceAll(s, `\"`, `"`)
	switch kind {
	case "Boolean":
		return s == "true"
	case "Integer":
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("integer %q: %v", s, err)
		}
		return n
	case "Float":
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("float %q: %v", s, err)
		}
		return f
	case "Object":
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("object %q: %v", s, err)
		}
		return v
	}
	return s
}

func TestFlagdTestbedEvaluatorCases(t *testing.T) {
	raw, err := os.ReadFile("testdata/flagd-testbed/testkit-flags.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := ParseDocument(raw)
	if err != nil {
		t.Fatal(err)
	}
	snap := newSnapshot(doc.Flags, doc.Evaluators, 1)
	files, _ := filepath.Glob("testdata/flagd-testbed/*.feature")
	ran, skipped := 0, 0
	for _, file := range files {
		for _, s := range parseFeature(t, file) {
			if hasTag(s.tags, "@fractional-v1") || hasStepPrefix(s.steps, "the resolved metadata") {
				skipped++
				continue
			}
			ran++
			t.Run(filepath.Base(file)+"/"+s.name, func(t *testing.T) {
				var key, kindName string
				var fallback any
				evalCtx := map[string]any{}
				var res Result
				for _, st := range s.steps {
					switch {
					case st == "an evaluator":
					case reFlag.MatchString(st):
						m := reFlag.FindStringSubmatch(st)
						kindName, key = m[1], m[2]
						fallback = typedValue(t, kindName, m[3])
					case reCtxKey.MatchString(st):
						m := reCtxKey.FindStringSubmatch(st)
						evalCtx[m[1]] = contextValue(t, m[2], m[3])
					case reCtxTK.MatchString(st):
						evalCtx["targetingKey"] = reCtxTK.FindStringSubmatch(st)[1]
					case reCtxNest.MatchString(st):
						m := reCtxNest.FindStringSubmatch(st)
						evalCtx[m[1]] = map[string]any{m[2]: m[3]}
					case st == "the flag was evaluated with details":
						res = Typed(snap.Evaluate(key, evalCtx, time.Now()), kindByName[kindName], fallback)
					case reValue.MatchString(st):
						want := typedValue(t, kindName, reValue.FindStringSubmatch(st)[1])
						if !reflect.DeepEqual(res.Value, want) {
							t.Errorf("value = %#v, want %#v (result %+v)", res.Value, want, res)
						}
					case reReason.MatchString(st):
						if want := reReason.FindStringSubmatch(st)[1]; res.Reason != want {
							t.Errorf("reason = %s, want %s (result %+v)", res.Reason, want, res)
						}
					case reErrCode.MatchString(st):
						if want := reErrCode.FindStringSubmatch(st)[1]; res.ErrorCode != want {
							t.Errorf("error code = %s, want %s (result %+v)", res.ErrorCode, want, res)
						}
					default:
						t.Fatalf("unknown step %q", st)
					}
				}
			})
		}
	}
	if ran < 60 {
		t.Errorf("only %d test bed cases ran (%d skipped)", ran, skipped)
	}
	t.Logf("%d test bed cases ran, %d skipped (fractional-v1 or metadata)", ran, skipped)
}

func contextValue(t *testing.T, kind, s string) any {
	switch kind {
	case "Integer", "Float":
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("number %q: %v", s, err)
		}
		return f
	case "Boolean":
		return s == "true"
	}
	return s
}

func hasTag(tags []string, tag string) bool {
	for _, x := range tags {
		if x == tag {
			return true
		}
	}
	return false
}

func hasStepPrefix(steps []string, prefix string) bool {
	for _, s := range steps {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}
