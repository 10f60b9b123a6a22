package adapter

import (
	"fmt"
	"strings"
)

// ConfigError prefixes a configuration error with where it was found,
// keeping one Prefix ("httplimit: ", "grpclimit: ") in front.
type ConfigError struct {
	Prefix, Where string
	Err           error
}

func (e *ConfigError) Error() string {
	return e.Prefix + e.Where + ": " + strings.TrimPrefix(e.Err.Error(), e.Prefix)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// ApplyOptions applies opts to c in order and returns their errors; a nil
// option is an error naming its index and fn, the constructor.
func ApplyOptions[C any, O ~func(*C) error](prefix, fn string, c *C, opts []O) []error {
	var errs []error
	for i, o := range opts {
		if o == nil {
			errs = append(errs, fmt.Errorf("%s%s: option %d is nil", prefix, fn, i))
			continue
		}
		if err := o(c); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
