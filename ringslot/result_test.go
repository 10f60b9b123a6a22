package ringslot

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// Result must stay at four fields (Verdict counting as one), each at most
// four fields itself: beyond that the compiler no longer keeps it in
// registers, and every frame of the decision path copies it through the
// stack with a store-forwarding stall.
func TestResultStaysInRegisters(t *testing.T) {
	rt := reflect.TypeFor[Result]()
	require.LessOrEqual(t, rt.NumField(), 4)
	for i := range rt.NumField() {
		if f := rt.Field(i).Type; f.Kind() == reflect.Struct {
			require.LessOrEqual(t, f.NumField(), 4, f.Name())
		}
	}
}
