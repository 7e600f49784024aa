package alertsig

import (
	"reflect"
	"testing"
	"time"
)

// Validate judges a config as NewVerifier would run it and changes nothing
// in it: defaults are WithDefaults' job, on a copy.
func TestVerifierConfigValidateLeavesTheConfigAsItWas(t *testing.T) {
	for _, make := range []func() VerifierConfig{
		func() VerifierConfig { return VerifierConfig{Keys: []Key{keyA}} },
		func() VerifierConfig { return VerifierConfig{} },
		func() VerifierConfig { return VerifierConfig{Keys: []Key{keyA, keyA}, MaxSkew: time.Millisecond} },
	} {
		c := make()
		_ = c.Validate()
		if !reflect.DeepEqual(make(), c) {
			t.Errorf("Validate changed %+v into %+v", make(), c)
		}
		if d := c.WithDefaults(); d.MaxAge != DefaultMaxAge || (c.MaxSkew == 0 && d.MaxSkew != DefaultMaxSkew) || c.MaxAge != 0 {
			t.Errorf("WithDefaults = %+v from %+v: want the defaults in the copy only", d, c)
		}
	}
	if err := (VerifierConfig{Keys: []Key{keyA}}).Validate(); err != nil {
		t.Errorf("one key, zero bounds: %v, want valid (the bounds take their defaults)", err)
	}
}
