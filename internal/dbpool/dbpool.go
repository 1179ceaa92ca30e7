// Package dbpool parses a PostgreSQL URL into the connection pool configuration every part of
// Taskgate uses (the console, its benchmark and soak programs, the tests), with the session
// settings the console's queries are written for.
package dbpool

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Settings are the session settings of every connection, sent at connect time.
//
// jit is off: the console runs short statements, many of them several times a second, and
// PostgreSQL compiles a statement with LLVM whenever the planner's cost estimate passes
// jit_above_cost (100,000 by default), which an estimate can do for a statement that reads a
// handful of rows. The watcher's take-in statement, estimated at 600,000 with 100,000 tasks
// held (its CTEs are estimated at hundreds of thousands of rows and return none), spent 0.4-0.6 s
// a pass compiling and 22 ms executing, and its backend took most of a core.
var Settings = map[string]string{"jit": "off"}

// Config parses url and sets Settings on it (a setting the URL gives itself is kept).
func Config(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	for k, v := range Settings {
		if _, set := cfg.ConnConfig.RuntimeParams[k]; !set {
			cfg.ConnConfig.RuntimeParams[k] = v
		}
	}
	return cfg, nil
}
