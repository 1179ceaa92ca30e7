package gates_test

import (
	"testing"

	"github.com/taskgate/taskgate/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
