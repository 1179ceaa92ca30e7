package killswitch

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/open-feature/go-sdk/openfeature"
)

// Flags is what Taskgate's code needs of a flag client. The OpenFeature client
// (*openfeature.Client) satisfies it; tests may serve any provider through one.
type Flags interface {
	BooleanValueDetails(ctx context.Context, flag string, defaultValue bool, evalCtx openfeature.EvaluationContext,
		options ...openfeature.Option) (openfeature.BooleanEvaluationDetails, error)
}

// ProviderName is the OpenFeature provider's name.
const ProviderName = "taskgate-postgres"

// Provider is the OpenFeature provider over a Service's in-memory cache. It emits
// PROVIDER_CONFIGURATION_CHANGED on every new set of definitions and PROVIDER_STALE,
// PROVIDER_ERROR and PROVIDER_READY as the cache's state changes.
type Provider struct {
	svc    *Service
	events chan openfeature.Event
	once   sync.Once
	stop   func()
	done   chan struct{}
}

// NewProvider returns the provider over svc.
func NewProvider(svc *Service) *Provider {
	return &Provider{svc: svc, events: make(chan openfeature.Event, 16), done: make(chan struct{})}
}

// Metadata names the provider.
func (p *Provider) Metadata() openfeature.Metadata { return openfeature.Metadata{Name: ProviderName} }

// Hooks are none.
func (p *Provider) Hooks() []openfeature.Hook { return nil }

// Init starts forwarding the service's changes as events; it fails while nothing is loaded.
func (p *Provider) Init(openfeature.EvaluationContext) error {
	p.once.Do(func() {
		ch, stop := p.svc.Subscribe()
		p.stop = stop
		go p.forward(ch)
	})
	if p.svc.Snapshot() == nil {
		_, why := p.svc.State()
		return openfeature.NewProviderNotReadyResolutionError("flags not loaded: " + why)
	}
	return nil
}

// Shutdown stops the events.
func (p *Provider) Shutdown() {
	if p.stop != nil {
		p.stop()
		<-p.done
	}
}

// EventChannel carries the provider's events.
func (p *Provider) EventChannel() <-chan openfeature.Event { return p.events }

func (p *Provider) forward(ch <-chan Snapshot) {
	defer close(p.done)
	last := StateNotReady
	var prev *Snapshot
	for snap := range ch {
		st, why := p.svc.State()
		if st != last {
			typ := map[State]openfeature.EventType{StateReady: openfeature.ProviderReady, StateStale: openfeature.ProviderStale,
				StateError: openfeature.ProviderError}[st]
			if typ != "" && last != StateNotReady {
				p.emit(openfeature.Event{ProviderName: ProviderName, EventType: typ,
					ProviderEventDetails: openfeature.ProviderEventDetails{Message: why}})
			}
			last = st
		}
		var changed []string
		for _, k := range snap.Keys() {
			if prev == nil || !sameFlag(prev, &snap, k) {
				changed = append(changed, k)
			}
		}
		if prev != nil {
			for _, k := range prev.Keys() {
				if _, ok := snap.Definition(k); !ok {
					changed = append(changed, k)
				}
			}
		}
		s := snap
		prev = &s
		p.emit(openfeature.Event{ProviderName: ProviderName, EventType: openfeature.ProviderConfigChange,
			ProviderEventDetails: openfeature.ProviderEventDetails{Message: "flag definitions changed", FlagChanges: changed}})
	}
}

func sameFlag(a, b *Snapshot, key string) bool {
	fa, okA := a.flags[key]
	fb, okB := b.flags[key]
	if !okA || !okB {
		return false
	}
	ja, _ := jsonOf(fa.flag)
	jb, _ := jsonOf(fb.flag)
	return ja == jb && string(fa.targeting) == string(fb.targeting)
}

func (p *Provider) emit(e openfeature.Event) {
	select {
	case p.events <- e:
	default: // a reader too slow loses events, never blocks the cache
	}
}

func (p *Provider) resolve(flag string, kind Kind, def any, flatCtx openfeature.FlattenedContext) (Result, openfeature.ProviderResolutionDetail) {
	r := Typed(p.svc.Evaluate(flag, map[string]any(flatCtx)), kind, def)
	d := openfeature.ProviderResolutionDetail{Reason: openfeature.Reason(r.Reason), Variant: r.Variant}
	if len(r.Metadata) > 0 {
		d.FlagMetadata = openfeature.FlagMetadata(r.Metadata)
	}
	switch r.ErrorCode {
	case "":
	case ErrorFlagNotFound:
		d.ResolutionError = openfeature.NewFlagNotFoundResolutionError(r.ErrorMessage)
	case ErrorTypeMismatch:
		d.ResolutionError = openfeature.NewTypeMismatchResolutionError(r.ErrorMessage)
	case ErrorParse:
		d.ResolutionError = openfeature.NewParseErrorResolutionError(r.ErrorMessage)
	case ErrorProviderNotReady:
		d.ResolutionError = openfeature.NewProviderNotReadyResolutionError(r.ErrorMessage)
	default:
		d.ResolutionError = openfeature.NewGeneralResolutionError(r.ErrorMessage)
	}
	return r, d
}

// BooleanEvaluation resolves a boolean flag.
func (p *Provider) BooleanEvaluation(_ context.Context, flag string, def bool, c openfeature.FlattenedContext) openfeature.BoolResolutionDetail {
	r, d := p.resolve(flag, KindBool, def, c)
	v, _ := r.Value.(bool)
	return openfeature.BoolResolutionDetail{Value: v, ProviderResolutionDetail: d}
}

// StringEvaluation resolves a string flag.
func (p *Provider) StringEvaluation(_ context.Context, flag string, def string, c openfeature.FlattenedContext) openfeature.StringResolutionDetail {
	r, d := p.resolve(flag, KindString, def, c)
	v, _ := r.Value.(string)
	return openfeature.StringResolutionDetail{Value: v, ProviderResolutionDetail: d}
}

// FloatEvaluation resolves a number flag.
func (p *Provider) FloatEvaluation(_ context.Context, flag string, def float64, c openfeature.FlattenedContext) openfeature.FloatResolutionDetail {
	r, d := p.resolve(flag, KindFloat, def, c)
	v, _ := r.Value.(float64)
	return openfeature.FloatResolutionDetail{Value: v, ProviderResolutionDetail: d}
}

// IntEvaluation resolves an integer flag.
func (p *Provider) IntEvaluation(_ context.Context, flag string, def int64, c openfeature.FlattenedContext) openfeature.IntResolutionDetail {
	r, d := p.resolve(flag, KindInt, def, c)
	v, _ := r.Value.(int64)
	return openfeature.IntResolutionDetail{Value: v, ProviderResolutionDetail: d}
}

// ObjectEvaluation resolves an object flag.
func (p *Provider) ObjectEvaluation(_ context.Context, flag string, def any, c openfeature.FlattenedContext) openfeature.InterfaceResolutionDetail {
	r, d := p.resolve(flag, KindObject, def, c)
	return openfeature.InterfaceResolutionDetail{Value: r.Value, ProviderResolutionDetail: d}
}

// ClientVerdict asks a Flags client (the OpenFeature client, or one over a test provider)
// whether a new Task start may go ahead, applying NewTaskStarts' fail-safe default.
func ClientVerdict(ctx context.Context, f Flags, tenant, workflow, server string) (bool, Result) {
	ec := openfeature.NewEvaluationContext(tenant, map[string]any{"tenant": tenant, "workflow": workflow, "server": server})
	d, err := f.BooleanValueDetails(ctx, NewTaskStarts.Key, NewTaskStarts.FailSafe, ec)
	r := Result{Key: NewTaskStarts.Key, Value: d.Value, Variant: d.Variant, Reason: string(d.Reason)}
	if err != nil || d.ErrorCode != "" {
		r.Reason, r.ErrorCode, r.ErrorMessage = ReasonFailedSafe, string(d.ErrorCode), d.ErrorMessage
		if r.ErrorCode == "" {
			r.ErrorCode = ErrorGeneral
		}
		return NewTaskStarts.FailSafe, r
	}
	return d.Value, r
}

func jsonOf(f Flag) (string, error) {
	b, err := json.Marshal(f)
	return string(b), err
}
