package config

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Store keeps the history of policy files the console has loaded.
type Store struct{ pool *pgxpool.Pool }

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Record notes that c was loaded now and returns its version id. Loading the same file again
// updates its last-loaded time instead of adding a row.
func (s *Store) Record(ctx context.Context, c *Config) (int64, error) {
	body, err := json.Marshal(c)
	if err != nil {
		return 0, fmt.Errorf("encode policy: %w", err)
	}
	var id int64
	err = s.pool.QueryRow(ctx, `
		INSERT INTO policy_versions (sha256, source, body) VALUES ($1, $2, $3)
		ON CONFLICT (sha256) DO UPDATE SET last_loaded_at = now(), source = EXCLUDED.source
		RETURNING id`, c.SHA256, c.Source, body).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record policy version: %w", err)
	}
	return id, nil
}
