package mcpclient_test

import (
	"errors"
	"io"
)

func errorsIs(err, target error) bool { return err != nil && errors.Is(err, target) }

func ioNopCloser(r io.Reader) io.ReadCloser { return io.NopCloser(r) }
