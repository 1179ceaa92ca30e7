package killswitch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/diegoholiveira/jsonlogic/v3"
	"github.com/twmb/murmur3"
	"golang.org/x/mod/semver"
)

// Reason codes of an evaluation: OpenFeature's, plus FailedSafe when the flag answered the
// fail-safe default declared next to its key.
const (
	ReasonStatic         = "STATIC"
	ReasonDefault        = "DEFAULT"
	ReasonTargetingMatch = "TARGETING_MATCH"
	ReasonDisabled       = "DISABLED"
	ReasonError          = "ERROR"
	// ReasonFailedSafe is the reason of a decision that answered the flag's fail-safe default
	// because the flag could not be evaluated (provider error, missing flag, type mismatch).
	ReasonFailedSafe = "FAILED_SAFE"
)

// Error codes, as OpenFeature names them.
const (
	ErrorFlagNotFound     = "FLAG_NOT_FOUND"
	ErrorParse            = "PARSE_ERROR"
	ErrorTypeMismatch     = "TYPE_MISMATCH"
	ErrorGeneral          = "GENERAL"
	ErrorProviderNotReady = "PROVIDER_NOT_READY"
)

// Result is the evaluation of one flag.
type Result struct {
	Key     string `json:"key"`
	Value   any    `json:"value,omitempty"`
	Variant string `json:"variant,omitempty"`
	Reason  string `json:"reason"`
	// ErrorCode is set when the flag could not be evaluated; Value is then meaningless.
	ErrorCode    string         `json:"errorCode,omitempty"`
	ErrorMessage string         `json:"errorDetails,omitempty"`
	Metadata     map[string]any `json:"metadata,omitempty"`
	// NoValue is true when the flag resolved to no variant (no default variant and targeting
	// gave null): the caller's default applies.
	NoValue bool `json:"-"`
}

// compiled is a flag ready to evaluate: its definition with $refs resolved.
type compiled struct {
	key       string
	flag      Flag
	targeting []byte // nil when the flag has no targeting
	err       error  // set when the definition cannot be evaluated
}

func compile(key string, f Flag, evaluators map[string]json.RawMessage) compiled {
	c := compiled{key: key, flag: f}
	if err := f.Validate(key); err != nil {
		c.err = err
		return c
	}
	t := bytes.TrimSpace(f.Targeting)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) || bytes.Equal(t, []byte("{}")) {
		return c
	}
	r, err := resolveRefs(t, evaluators)
	if err != nil {
		c.err = fmt.Errorf("%w: flag %s: targeting: %v", ErrInvalid, key, err)
		return c
	}
	if bytes.Contains(r, []byte(`{"$ref":`)) {
		c.err = fmt.Errorf("%w: flag %s: targeting refers to an evaluator that is not defined", ErrInvalid, key)
		return c
	}
	var probe any
	if err := json.Unmarshal(r, &probe); err != nil {
		c.err = fmt.Errorf("%w: flag %s: targeting: %v", ErrInvalid, key, err)
		return c
	}
	if m, ok := probe.(map[string]any); ok && len(m) == 0 {
		return c
	}
	c.targeting = r
	return c
}

var registerOnce sync.Once

// registerOperators adds flagd's custom operators to the JsonLogic library (once per process).
func registerOperators() {
	registerOnce.Do(func() {
		jsonlogic.AddOperator("fractional", fractional)
		jsonlogic.AddOperator("sem_ver", semVer)
		jsonlogic.AddOperator("starts_with", func(values, _ any) any { return stringCompare(values, strings.HasPrefix) })
		jsonlogic.AddOperator("ends_with", func(values, _ any) any { return stringCompare(values, strings.HasSuffix) })
	})
}

// evaluate resolves the flag for the evaluation context (the targeting key under "targetingKey").
func (c compiled) evaluate(evalCtx map[string]any, now time.Time) Result {
	res := Result{Key: c.key, Metadata: c.flag.Metadata}
	if c.err != nil {
		res.Reason, res.ErrorCode, res.ErrorMessage = ReasonError, ErrorParse, c.err.Error()
		return res
	}
	if c.flag.State == StateDisabled {
		res.Reason, res.NoValue = ReasonDisabled, true
		return res
	}
	def := ""
	if c.flag.DefaultVariant != nil {
		def = *c.flag.DefaultVariant
	}
	pick := func(variant, reason string) Result {
		if variant == "" {
			res.Reason, res.NoValue = ReasonDefault, true
			return res
		}
		v, ok := c.flag.Variants[variant]
		if !ok {
			res.Reason, res.ErrorCode = ReasonError, ErrorGeneral
			res.ErrorMessage = fmt.Sprintf("targeting of %s chose %q, which is not one of its variants", c.key, variant)
			return res
		}
		res.Value, res.Variant, res.Reason = v, variant, reason
		return res
	}
	if c.targeting == nil {
		return pick(def, ReasonStatic)
	}
	registerOperators()
	data := make(map[string]any, len(evalCtx)+1)
	for k, v := range evalCtx {
		data[k] = v
	}
	flagd := map[string]any{"flagKey": c.key, "timestamp": now.Unix()}
	if m, ok := data["$flagd"].(map[string]any); ok {
		for k, v := range m {
			if _, set := flagd[k]; !set {
				flagd[k] = v
			}
		}
	}
	data["$flagd"] = flagd
	dataJSON, err := json.Marshal(data)
	if err != nil {
		res.Reason, res.ErrorCode, res.ErrorMessage = ReasonError, ErrorGeneral, "evaluation context: "+err.Error()
		return res
	}
	out, err := applyRule(c.targeting, dataJSON)
	if err != nil {
		res.Reason, res.ErrorCode, res.ErrorMessage = ReasonError, ErrorParse, fmt.Sprintf("targeting of %s: %v", c.key, err)
		return res
	}
	trimmed := strings.TrimSpace(string(out))
	if trimmed == "null" {
		return pick(def, ReasonDefault)
	}
	return pick(strings.ReplaceAll(trimmed, `"`, ""), ReasonTargetingMatch)
}

// applyRule runs JsonLogic, turning a panic of an operator into an error.
func applyRule(rule, data []byte) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("jsonlogic: %v", p)
		}
	}()
	var buf bytes.Buffer
	if err := jsonlogic.Apply(bytes.NewReader(rule), bytes.NewReader(data), &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// fractional buckets a value across weighted variants as flagd does: the bucketing value is the
// first argument when it is a string, otherwise the flag key followed by the targeting key; its
// murmur3 (32-bit, seed 0) hash h is mapped to h*totalWeight>>32 and the variant whose
// cumulative weight range holds it is chosen. Weights default to 1.
func fractional(values, data any) any {
	args, ok := values.([]any)
	if !ok || len(args) == 0 {
		return nil
	}
	ctx, ok := data.(map[string]any)
	if !ok {
		return nil
	}
	flagKey := ""
	if p, ok := ctx["$flagd"].(map[string]any); ok {
		flagKey, _ = p["flagKey"].(string)
	}
	bucketBy, ok := args[0].(string)
	if ok {
		args = args[1:]
	} else {
		if args[0] == nil {
			args = args[1:]
		}
		tk, ok := ctx["targetingKey"].(string)
		if !ok || tk == "" {
			return nil
		}
		bucketBy = flagKey + tk
	}
	type weighted struct {
		variant any
		weight  int64
	}
	var dist []weighted
	var total int64
	for _, a := range args {
		pair, ok := a.([]any)
		if !ok || len(pair) == 0 {
			return nil
		}
		switch pair[0].(type) {
		case string, bool, float64, nil:
		default:
			return nil
		}
		w := int64(1)
		if len(pair) >= 2 && pair[1] != nil {
			f, ok := pair[1].(float64)
			if !ok || f != math.Trunc(f) || f > math.MaxInt32 {
				return nil
			}
			w = int64(f)
		}
		if w < 0 {
			w = 0
		}
		total += w
		dist = append(dist, weighted{pair[0], w})
	}
	if total == 0 || total > math.MaxInt32 {
		return nil
	}
	bucket := (uint64(murmur3.StringSum32(bucketBy)) * uint64(total)) >> 32
	var end uint64
	for _, d := range dist {
		end += uint64(d.weight) //nolint:gosec // weights are 0 to MaxInt32, clamped above
		if bucket < end {
			return d.variant
		}
	}
	return nil
}

// semVer compares two semantic versions: [version, operator, version] with =, !=, <, <=, >,
// >=, ^ (same major) and ~ (same major and minor). A leading v is optional.
func semVer(values, _ any) any {
	args, ok := values.([]any)
	if !ok || len(args) != 3 {
		return nil
	}
	a, okA := normaliseVersion(args[0])
	op, okOp := args[1].(string)
	b, okB := normaliseVersion(args[2])
	if !okA || !okOp || !okB {
		return nil
	}
	c := semver.Compare(a, b)
	switch op {
	case "=":
		return c == 0
	case "!=":
		return c != 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	case "^":
		return semver.Major(a) == semver.Major(b)
	case "~":
		return semver.MajorMinor(a) == semver.MajorMinor(b)
	}
	return nil
}

func normaliseVersion(v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		s = fmt.Sprintf("%v", v)
	}
	if !strings.HasPrefix(s, "v") {
		s = "v" + strings.TrimPrefix(s, "V")
	}
	return s, semver.IsValid(s)
}

func stringCompare(values any, cmp func(s, affix string) bool) any {
	args, ok := values.([]any)
	if !ok || len(args) != 2 {
		return nil
	}
	s, ok1 := args[0].(string)
	affix, ok2 := args[1].(string)
	if !ok1 || !ok2 {
		return nil
	}
	return cmp(s, affix)
}
