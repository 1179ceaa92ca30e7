package mcpclient_test

import (
	"errors"
	"io"
)

func errorsIs(err, target error) bool { return err != nil && errors.Is(err, target) }

func asAny[T any](err error, target *T) bool { return errors.As(err, target) }

func ioNopCloser(r io.Reader) io.ReadCloser { return io.NopCloser(r) }
