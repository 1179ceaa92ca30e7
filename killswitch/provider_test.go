package killswitch

import (
	"context"
	"testing"
	"time"

	"github.com/open-feature/go-sdk/openfeature"
	"github.com/open-feature/go-sdk/openfeature/isolated"
	"github.com/open-feature/go-sdk/openfeature/memprovider"

	"github.com/taskgate/taskgate/internal/pgtest"
)

func TestOpenFeatureProvider(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	svc := open(t, ctx, pgtest.New(t), Config{})
	api := isolated.NewAPI()
	t.Cleanup(func() { _ = api.Shutdown(context.Background()) })
	changed := make(chan openfeature.EventDetails, 8)
	cb := func(d openfeature.EventDetails) { changed <- d }
	api.AddHandler(openfeature.ProviderConfigChange, &cb)
	if err := api.SetProviderAndWait(ctx, NewProvider(svc)); err != nil {
		t.Fatal(err)
	}
	client := api.NewClient()
	var flags Flags = client // the OpenFeature client satisfies the package's interface
	if ok, r := ClientVerdict(ctx, flags, "acme", "refund", "billing"); !ok || r.Reason != ReasonStatic {
		t.Fatalf("released: %v %+v", ok, r)
	}
	if err := svc.Engage(ctx, ops, ScopeWorkflow, "refund", "incident"); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-changed:
		found := false
		for _, k := range d.FlagChanges {
			found = found || k == NewTaskStarts.Key
		}
		if !found {
			t.Errorf("configuration change names %v", d.FlagChanges)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no PROVIDER_CONFIGURATION_CHANGED after the switch")
	}
	ok, r := ClientVerdict(ctx, flags, "acme", "refund", "billing")
	if ok || r.Variant != "kill-switch:workflow:refund" || r.Reason != ReasonTargetingMatch {
		t.Fatalf("engaged: %v %+v", ok, r)
	}
	d, err := client.StringValueDetails(ctx, NewTaskStarts.Key, "x", openfeature.NewEvaluationContext("acme", nil))
	if err == nil || d.ErrorCode != openfeature.TypeMismatchCode {
		t.Errorf("type mismatch through the SDK: %+v %v", d, err)
	}
	if _, err := client.BooleanValueDetails(ctx, "no-such-flag", true, openfeature.EvaluationContext{}); err == nil {
		t.Error("a missing flag gave no error")
	}
}

// Code that takes Flags runs on any provider; with OpenFeature's in-memory provider as the test
// provider, a missing flag fails safe and a present one is obeyed.
func TestClientVerdictWithTestProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	api := isolated.NewAPI()
	t.Cleanup(func() { _ = api.Shutdown(context.Background()) })
	if err := api.SetProviderAndWait(ctx, memprovider.NewInMemoryProvider(map[string]memprovider.InMemoryFlag{
		NewTaskStarts.Key: {Key: NewTaskStarts.Key, State: memprovider.Enabled, DefaultVariant: "off",
			Variants: map[string]any{"on": true, "off": false}},
	})); err != nil {
		t.Fatal(err)
	}
	if ok, r := ClientVerdict(ctx, api.NewClient(), "acme", "refund", "billing"); ok || r.Variant != "off" || r.Reason == ReasonFailedSafe {
		t.Fatalf("test provider off: %v %+v", ok, r)
	}
	empty := isolated.NewAPI()
	t.Cleanup(func() { _ = empty.Shutdown(context.Background()) })
	if err := empty.SetProviderAndWait(ctx, memprovider.NewInMemoryProvider(nil)); err != nil {
		t.Fatal(err)
	}
	if ok, r := ClientVerdict(ctx, empty.NewClient(), "acme", "refund", "billing"); ok || r.Reason != ReasonFailedSafe || r.ErrorCode != ErrorFlagNotFound {
		t.Fatalf("missing flag: %v %+v", ok, r)
	}
}
